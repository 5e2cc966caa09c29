"""LeRobot's async inference door: gRPC `transport.AsyncInference` with pickled payloads,
served from the node's one action query (`--lerobot-grpc-port`).

`wire.py` (the protobuf messages and the 2 MiB chunking), `unpickler.py` (the allow-listed
unpickler) onto `lerobot_types.py` (the node's stand-ins for LeRobot's classes),
`policy_setup.py` (the client's policy instructions checked against the served policy),
`observation.py` (an observation as a query; the noise rule), `reply.py` (replies as LeRobot's
own `TimedAction` pickles), `service.py` (the four RPCs' semantics), `server.py` (grpc.aio on
the HTTP server's loop, API key, metrics).
"""
