"""openpi's own client package (`openpi-client`, installed with --no-deps) against a live node.

`WebsocketClientPolicy(host, port)` connects to the node's HTTP port; the node is started with
`--openpi-action-horizon 3` and `--openpi-unnorm-key demo_arm`. Reference for the actions:
transformers' LLaVA generation constrained to the action bins, on the checkpoint's processor with
the instruction first and the cameras in observation order, decoded with OpenVLA's formula.
"""

from __future__ import annotations

import threading

import httpx
import msgpack
import numpy as np
import pytest
import websockets.sync.client

from tests.support.actions import (
    bin_range,
    demo_path,
    instruction_messages,
    openvla_decode,
    read_action_config,
)
from tests.support.hf_reference import HFLlava
from tests.support.images import png_base64, random_rgb
from tests.support.server import module_server

websocket_client_policy = pytest.importorskip("openpi_client.websocket_client_policy")
action_chunk_broker = pytest.importorskip("openpi_client.action_chunk_broker")
msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")

# openpi-client 0.1.2 calls websockets' sync connect() the pre-v14 way; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")

HORIZON = 3
PROMPT = "put the carrot into the sink"


server = module_server(
    None, "--openpi-action-horizon", str(HORIZON), "--openpi-unnorm-key", "demo_arm"
)


@pytest.fixture(scope="module")
def cfg():
    return read_action_config(demo_path())


def policy(server):
    return websocket_client_policy.WebsocketClientPolicy("127.0.0.1", server.port)


def libero_obs(seed: int) -> dict:
    return {
        "observation/image": random_rgb(224, 224, seed=seed),
        "observation/wrist_image": random_rgb(224, 224, seed=seed + 1),
        "observation/state": np.zeros(8, dtype=np.float32),
        "prompt": PROMPT,
    }


def test_metadata_on_connect(server, cfg):
    meta = policy(server).get_server_metadata()
    assert meta["action_dim"] == cfg["action_dim"]
    assert meta["action_horizon"] == HORIZON
    assert meta["unnorm_key"] == "demo_arm"
    assert meta["unnorm_keys"] == sorted(cfg["norm_stats"])
    assert meta["model"] == demo_path().name


def test_actions_equal_constrained_transformers(server, cfg):
    obs = libero_obs(seed=40)
    client = policy(server)
    out = client.infer(obs)
    actions = out["actions"]
    assert isinstance(actions, np.ndarray) and actions.shape == (HORIZON, cfg["action_dim"])
    assert np.isfinite(actions).all()
    images = [obs["observation/image"], obs["observation/wrist_image"]]
    ref = HFLlava(demo_path()).generate(
        instruction_messages(PROMPT, 2), images, HORIZON * cfg["action_dim"], bin_range(cfg)
    )
    sure = ref.steps_before_tie() // cfg["action_dim"]
    expected = openvla_decode(ref.tokens, cfg, "demo_arm")
    np.testing.assert_allclose(actions[:sure], expected[:sure], rtol=0, atol=1e-12)
    stats = cfg["norm_stats"]["demo_arm"]["action"]
    mask = np.asarray(stats["mask"])
    assert (actions[:, mask] >= np.asarray(stats["q01"])[mask]).all()
    assert (actions[:, mask] <= np.asarray(stats["q99"])[mask]).all()
    assert out["server_timing"]["infer_ms"] > 0 and "prev_total_ms" not in out["server_timing"]
    assert len(out["policy_timing"]["action_done_ms"]) == HORIZON
    again = client.infer(obs)
    np.testing.assert_array_equal(again["actions"], actions)  # greedy, same frame
    assert again["server_timing"]["prev_total_ms"] > 0


def test_aloha_style_observation_with_overrides(server):
    """CHW uint8 and float [0, 1] images under nested `images/...` keys, horizon and stats
    chosen per observation; equal to /v1/actions on the same pixels."""
    high = random_rgb(224, 224, seed=50)
    wrist = random_rgb(224, 224, seed=51)
    wrist_float = wrist.astype(np.float32) / 255.0
    obs = {
        "state": np.zeros(14),
        "images": {"cam_high": high.transpose(2, 0, 1).copy(), "cam_left_wrist": wrist_float},
        "prompt": PROMPT,
        "num_actions": 2,
        "unnorm_key": "aloha_left",
    }
    out = policy(server).infer(obs)
    with server.client() as c:
        ref = c.post(
            "/v1/actions",
            json={
                "instruction": PROMPT,
                "image_data": [png_base64(high), png_base64(wrist)],
                "unnorm_key": "aloha_left",
                "num_actions": 2,
            },
        ).json()
    assert out["actions"].shape == (2, 7)
    np.testing.assert_array_equal(out["actions"], np.asarray(ref["actions"]))


def test_action_chunk_broker_hands_out_the_chunk_step_by_step(server):
    client = policy(server)
    obs = libero_obs(seed=60)
    chunk = client.infer(obs)["actions"]
    broker = action_chunk_broker.ActionChunkBroker(client, action_horizon=HORIZON)
    steps = [broker.infer(obs)["actions"] for _ in range(HORIZON)]
    np.testing.assert_array_equal(np.stack(steps), chunk)


def _raw_exchange(server, frame: bytes | str) -> tuple[str, int | None]:
    """Send one frame on a fresh connection; the error text frame and the close code."""
    with websockets.sync.client.connect(f"ws://127.0.0.1:{server.port}") as ws:
        ws.recv()  # metadata
        ws.send(frame)
        reply = ws.recv()
        with pytest.raises(websockets.ConnectionClosed):
            ws.recv()
        return reply, ws.close_code


@pytest.mark.parametrize(
    ("frame", "needle"),
    [
        (b"\xc1not msgpack", "msgpack"),
        ("a text frame", "binary"),
        (
            msgpack.packb(
                {
                    "prompt": "x",
                    "observation/image": {
                        b"__ndarray__": True,
                        b"data": b"\0" * 8,
                        b"dtype": "|O",
                        b"shape": [1],
                    },
                }
            ),
            "not accepted",
        ),
        (
            msgpack.packb(
                {
                    "prompt": "x",
                    "image": {
                        b"__ndarray__": True,
                        b"data": b"\0" * 5,
                        b"dtype": "|u1",
                        b"shape": [2, 2, 3],
                    },
                }
            ),
            "data bytes",
        ),
    ],
)
def test_malformed_frames_get_an_error_frame_and_close_1008(server, frame, needle):
    reply, code = _raw_exchange(server, frame)
    assert isinstance(reply, str) and needle in reply
    assert code == 1008


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"prompt": None}, "prompt"),
        ({"observation/image": None, "observation/wrist_image": None}, "no camera image"),
        ({"observation/image": np.zeros((8, 8, 5), np.uint8)}, "observation/image"),
        ({"unnorm_key": "no_robot"}, "unnorm_key"),
        ({"num_actions": 0}, "num_actions"),
        ({"num_actions": "3"}, "num_actions"),
    ],
)
def test_bad_observation_raises_in_the_client_and_the_node_keeps_serving(server, change, needle):
    obs = {k: v for k, v in {**libero_obs(seed=70), **change}.items() if v is not None}
    client = policy(server)
    with pytest.raises(RuntimeError, match="Error in inference server") as info:
        client.infer(obs)
    assert needle in str(info.value)
    with pytest.raises(websockets.ConnectionClosed):
        client.infer(libero_obs(seed=70))  # openpi's server closes after an error, as we do
    assert policy(server).infer(libero_obs(seed=70))["actions"].shape == (HORIZON, 7)


def test_healthz(server):
    r = httpx.get(f"{server.url}/healthz")
    assert r.status_code == 200 and r.text == "OK\n"


def test_a_long_query_does_not_hold_up_other_connections(server):
    """One connection asks for 60 actions; a second one asked for 1 while that runs gets its
    answer first: inference is awaited, never run on the event loop."""
    long_done = threading.Event()
    results: dict[str, np.ndarray] = {}

    def long_query() -> None:
        obs = {**libero_obs(seed=80), "num_actions": 60}
        results["long"] = policy(server).infer(obs)["actions"]
        long_done.set()

    thread = threading.Thread(target=long_query)
    with server.client() as c:
        thread.start()
        while not c.get("/get_server_info").json()["internal_states"][0]["num_running_reqs"]:
            assert not long_done.is_set(), "the long query ended before it was seen running"
        results["short"] = policy(server).infer({**libero_obs(seed=81), "num_actions": 1})[
            "actions"
        ]
        short_first = not long_done.is_set()
    thread.join(timeout=120)
    assert short_first
    assert results["short"].shape == (1, 7) and results["long"].shape == (60, 7)


# ---- the wire format and the handshake, without a server --------------------------------------


def test_wire_format_round_trips_with_openpis_own_codec():
    from vla_server.frontend.openpi_wire import pack, unpack

    value = {
        "actions": np.arange(21, dtype=np.float64).reshape(3, 7) / 7,
        "image": random_rgb(4, 5, seed=1),
        "big_endian": np.arange(4, dtype=">f4"),
        "strided": np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],
        "scalar": np.float32(2.5),
        "nested": {"prompt": "x", "n": 3, "timing": [1.0, None]},
    }
    theirs = msgpack_numpy.unpackb(pack(value))
    ours = unpack(msgpack_numpy.packb(value))
    for got in (theirs, ours):
        assert set(got) == set(value)
        for key in ("actions", "image", "big_endian", "strided"):
            assert got[key].dtype == value[key].dtype
            np.testing.assert_array_equal(got[key], value[key])
        assert got["scalar"] == value["scalar"] and type(got["scalar"]) is np.float32
        assert got["nested"] == value["nested"]
