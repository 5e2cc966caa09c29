"""`--api-key` on the LeRobot door: a call without `authorization` metadata (what LeRobot's
RobotClient sends) is refused UNAUTHENTICATED and counted as a 401; with the key it is served."""

from __future__ import annotations

import grpc
import pytest

from tests.support.lerobot_wire import RawClient
from tests.support.server import free_port, metric_sum, module_server
from vla_server.policies.pi0.tiny import pi0_model_path

PORT = free_port()
KEY = "robot-secret"
server = module_server(
    lambda: pi0_model_path("pi0", "bare"), "--lerobot-grpc-port", str(PORT), api_key=KEY
)


def test_the_door_needs_the_key_as_metadata(server):
    for metadata in ((), (("authorization", "Bearer wrong"),)):
        with RawClient(PORT, metadata) as c, pytest.raises(grpc.RpcError) as e:
            c.ready()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert e.value.details().startswith("authorization:")
    for scheme in ("Bearer", "Api-Key"):
        with RawClient(PORT, (("authorization", f"{scheme} {KEY}"),)) as c:
            assert c.ready() == b""
    with server.client() as h:
        text = h.get("/metrics").text
    route = "grpc:/transport.AsyncInference/Ready"
    assert metric_sum(text, "vla_http_requests_total", route=route, status="401") == 2
    assert metric_sum(text, "vla_http_requests_total", route=route, status="200") == 2
