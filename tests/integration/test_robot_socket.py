"""vLLM-Omni's robot socket (`WS /v1/realtime/robot/openpi`) on the tiny pi0, driven the way
vLLM-Omni's example client drives it (`openpi_client.WebsocketClientPolicy` +
`np.asarray(policy.infer(obs))`) and by a raw WebSocket for the frames that client cannot send.

The reference for every chunk is `POST /v1/actions` on the same observation and seed; the seed of
a request without one follows the socket's documented rule, recomputed here from its text:
blake2b(person "vla-robot-seed", "{session_id}\\0{k}"), 8 bytes little-endian, low 31 bits.
"""

from __future__ import annotations

import hashlib

import msgpack
import numpy as np
import pytest
import websockets.sync.client

from tests.support.images import png_base64, random_rgb
from tests.support.server import (
    idle_state,
    metric_sum,
    module_server,
    post_actions,
    wait_idle,
)
from vla_server.policies.pi0.tiny import pi0_model_path

websocket_client_policy = pytest.importorskip("openpi_client.websocket_client_policy")
msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")

PATH = "/v1/realtime/robot/openpi"
PROMPT = "pick up the red block"
MAX_PAYLOAD = 200_000

server = module_server(
    lambda: pi0_model_path("pi0", "bare"),
    *("--robot-openpi-max-payload-bytes", str(MAX_PAYLOAD)),
    *("--robot-openpi-idle-timeout", "2"),
)


def rule_seed(session_id: str, k: int) -> int:
    digest = hashlib.blake2b(f"{session_id}\0{k}".encode(), digest_size=8, person=b"vla-robot-seed")
    return int.from_bytes(digest.digest(), "little") & 0x7FFF_FFFF


def observation(i: int) -> dict:
    """vLLM-Omni's pi0 observation keys: LeRobot camera names under `observation.images.`."""
    return {
        "observation.images.base_0_rgb": random_rgb(40, 48, seed=2 * i),
        "observation.images.wrist_0_rgb": random_rgb(32, 32, seed=2 * i + 1),
        "state": np.array([0.1 * i, 1.0, -0.5, 2.0], dtype=np.float32),
        "prompt": PROMPT,
    }


def expected(srv, i: int, seed: int) -> np.ndarray:
    obs = observation(i)
    body = {
        "instruction": PROMPT,
        "image_data": {
            "base_0_rgb": png_base64(obs["observation.images.base_0_rgb"]),
            "wrist_0_rgb": png_base64(obs["observation.images.wrist_0_rgb"]),
        },
        "state": obs["state"].tolist(),
        "seed": seed,
    }
    return np.asarray(post_actions(srv, body)["actions"], dtype=np.float32)


def client(srv):
    return websocket_client_policy.WebsocketClientPolicy(f"ws://127.0.0.1:{srv.port}{PATH}")


def test_the_handshake_is_the_served_policy(server):
    config = client(server).get_server_metadata()
    assert config["action_horizon"] == 4 and config["action_dim"] == 3
    assert config["cameras"] == ["base_0_rgb", "wrist_0_rgb"] and config["state_dim"] == 4
    assert (config["n_external_cameras"], config["needs_wrist_camera"]) == (1, True)
    assert config["image_resolution"] == [28, 28] and config["max_cameras"] == 2


def test_chunks_equal_v1_actions_under_the_noise_rule_and_reset_replays(server):
    policy = client(server)
    first = [np.asarray(policy.infer({**observation(i), "session_id": "arm-1"})) for i in range(3)]
    for i, chunk in enumerate(first):
        assert chunk.dtype == np.float32 and chunk.shape == (4, 3)  # the bare array
        np.testing.assert_allclose(chunk, expected(server, i, rule_seed("arm-1", i)), atol=1e-5)
    assert policy.infer({"endpoint": "reset"}) == {"status": "reset successful"}
    again = [np.asarray(policy.infer(observation(i))) for i in range(3)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    # A new session id starts its own count; a seed given wins over the rule.
    other = np.asarray(policy.infer({**observation(0), "session_id": "arm-2"}))
    np.testing.assert_allclose(other, expected(server, 0, rule_seed("arm-2", 0)), atol=1e-5)
    seeded = np.asarray(policy.infer({**observation(1), "seed": 7}))
    np.testing.assert_allclose(seeded, expected(server, 1, 7), atol=1e-5)


def _ask(ws, payload: bytes) -> dict | np.ndarray:
    ws.send(payload)
    return msgpack_numpy.unpackb(ws.recv(timeout=60))


BAD_FRAMES = {
    "endpoint": {**observation(0), "endpoint": "train"},
    "session_id": {**observation(0), "session_id": 5},
    "sampling_params": {**observation(0), "sampling_params": {"guidance_scale": 2.0}},
    "sampling_params.num_inference_steps": {
        **observation(0),
        "sampling_params": {"num_inference_steps": 3},
    },
    "state": {**observation(0), "state": np.zeros(7, dtype=np.float32)},
    "prompt": {k: v for k, v in observation(0).items() if k != "prompt"},
    "observation.images.left_wrist_0_rgb": {
        **observation(0),
        "observation.images.left_wrist_0_rgb": random_rgb(8, 8, seed=5),
    },
    "observation.images.base_0_rgb": {
        **observation(0),
        "observation.images.base_0_rgb": np.full((4, 4, 3), np.nan, dtype=np.float32),
    },
}


def test_errors_name_the_field_and_leave_the_socket_and_the_node_serving(server):
    url = f"ws://127.0.0.1:{server.port}{PATH}"
    with websockets.sync.client.connect(url, max_size=None) as ws:
        msgpack.unpackb(ws.recv(timeout=60))  # the handshake
        for field, frame in BAD_FRAMES.items():
            reply = _ask(ws, msgpack_numpy.packb(frame))
            assert reply["type"] == "error" and reply["message"].startswith(f"{field}:"), reply
        assert _ask(ws, b"\xc1 not msgpack")["message"].startswith("payload:")
        big = {**observation(0), "pad": np.zeros(MAX_PAYLOAD, dtype=np.uint8)}
        assert "payload limit" in _ask(ws, msgpack_numpy.packb(big))["message"]
        ws.send("a text frame is skipped")
        ws.send(b"")  # and so is an empty one
        # The same socket still serves, and the failed frames did not count for the seed rule.
        chunk = _ask(ws, msgpack_numpy.packb(observation(0)))
        np.testing.assert_allclose(chunk, expected(server, 0, rule_seed("", 0)), atol=1e-5)
    with server.client() as c:
        assert idle_state(c) == {"pending": 0, "kv_used": 0}
        assert wait_idle(c)["internal_states"][0]["num_running_reqs"] == 0
    # The door has its own label: this test's 9 refused frames (no earlier test sent a bad one).
    with server.client() as c:
        text = c.get("/metrics").text
    refused = metric_sum(text, "vla_http_requests_total", route=PATH, status="400")
    assert refused == len(BAD_FRAMES) + 2


def test_an_idle_socket_is_closed(server):
    url = f"ws://127.0.0.1:{server.port}{PATH}"
    with websockets.sync.client.connect(url) as ws:
        ws.recv(timeout=60)  # the handshake; then nothing is sent
        with pytest.raises(websockets.exceptions.ConnectionClosedOK) as closed:
            ws.recv(timeout=60)
    assert closed.value.rcvd.reason == "idle timeout"


keyed_server = module_server(lambda: pi0_model_path("pi0", "bare"), "--api-key", "sekret")


def test_the_api_key_guards_the_socket(keyed_server):
    url = f"ws://127.0.0.1:{keyed_server.port}{PATH}"
    with pytest.raises(websockets.exceptions.InvalidHandshake):
        websockets.sync.client.connect(url).close()
    policy = websocket_client_policy.WebsocketClientPolicy(url, api_key="sekret")
    assert np.asarray(policy.infer(observation(0))).shape == (4, 3)
