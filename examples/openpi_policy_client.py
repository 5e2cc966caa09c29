"""Drive the node with openpi's own policy client, exactly as an openpi robot runtime would.

    pip install --no-deps openpi-client && pip install msgpack websockets dm-tree typing_extensions
    vla-server serve --openpi-action-horizon 4 --openpi-unnorm-key demo_arm &
    python examples/openpi_policy_client.py --port 30000

The client connects to ws://host:port (the node's HTTP port; the policy WebSocket is served at
`/`). Images are found by key (anything with "image" in its name, or the server's
--openpi-image-keys);
`state` is accepted and ignored by LLaVA-style VLAs. `ActionChunkBroker` hands out one action
per step and asks the node for a new chunk when the current one is used up.
"""

from __future__ import annotations

import argparse

import numpy as np
from openpi_client import action_chunk_broker, websocket_client_policy


def observation(step: int) -> dict:
    rng = np.random.default_rng(step // 4)  # a new camera frame every 4 control steps
    return {
        "observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/state": np.zeros(8, dtype=np.float32),
        "prompt": "pick up the red block",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    args = parser.parse_args()
    policy = websocket_client_policy.WebsocketClientPolicy(args.host, args.port)
    meta = policy.get_server_metadata()
    print("server metadata:", meta)
    out = policy.infer(observation(0))
    print("chunk", out["actions"].shape, "server_timing", out["server_timing"])
    broker = action_chunk_broker.ActionChunkBroker(policy, action_horizon=meta["action_horizon"])
    for step in range(8):
        action = broker.infer(observation(step))["actions"]
        print(f"step {step}:", np.round(action, 4).tolist())


if __name__ == "__main__":
    main()
