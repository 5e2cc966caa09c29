"""SGLang's action API (`/v1/actions/generations`, `/v1/actions/metadata`,
`WS /v1/actions/realtime`, `WS /openpi/policy`) on the tiny pi0 and pi0.5, against `/v1/actions`.

Every chunk through every SGLang door (JSON, msgpack, both WebSockets; all four image encodings)
equals `/v1/actions`' on the same observation and seed, or the same starting noise, within 1e-5
(`tests/support/doors.py`). The pi0 node runs with an API key, so every door is also shown to
work with it, and to refuse without it. Hostile input on every door is a 400 (an error frame on
the sockets, which stay open) naming the field, with nothing left running and no KV in use.
"""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
import websockets.sync.client

from tests.support.doors import (
    SGLANG_TOLERANCE,
    same_chunk_through_sglang_doors,
    sglang_chunks,
    sglang_tensor,
    v1_actions_chunk,
)
from tests.support.images import png_base64, random_rgb
from tests.support.server import assert_nothing_left, metric_sum, module_server
from vla_server.policies.pi0.tiny import pi0_model_path
from vla_server.policies.registry import detect

msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")

KEY = "sekret"
MAX_FRAME = 300_000
TASK = "pick up the red block"
STATE = [0.1, 1.0, -0.5, 2.0]
GENERATIONS, REALTIME, OPENPI = "/v1/actions/generations", "/v1/actions/realtime", "/openpi/policy"
# Written by `python -m vla_server.bench sglang_action --capture ...` (SGLang 0.5.23's client).
RECORDED = (
    Path(__file__).parents[1] / "fixtures/client_requests/sglang_action/bench_pi05_openpi.json"
)

pi0 = module_server(
    lambda: pi0_model_path("pi0", "bare"),
    *("--sglang-action-max-payload-bytes", str(MAX_FRAME)),
    api_key=KEY,
)
pi05 = module_server(lambda: pi0_model_path("pi05", "bare"))


def frames(seed: int = 0) -> dict[str, np.ndarray]:
    return {"base_0_rgb": random_rgb(40, 48, seed), "wrist_0_rgb": random_rgb(32, 32, seed + 1)}


def seed_noise(seed: int) -> np.ndarray:
    """The node's documented noise of `seed` (`model/denoise.initial_noise`), [4, 32]."""
    generator = torch.Generator("cpu").manual_seed(seed)
    return torch.randn((1, 4, 32), generator=generator, dtype=torch.float32)[0].numpy()


@pytest.mark.parametrize("server", ["pi0", "pi05"])
def test_every_door_gives_the_v1_actions_chunk(server, request):
    srv = request.getfixturevalue(server)
    diffs = same_chunk_through_sglang_doors(srv, frames(), TASK, STATE, seed=7)
    assert set(diffs) == {"http", "http_msgpack", "realtime_ws", "openpi_ws"}
    # The caller's noise is the starting noise: the seed's own noise gives the seed's chunk.
    seeded = v1_actions_chunk(srv, frames(), TASK, STATE, seed=7)
    by_noise = sglang_chunks(srv, frames(), TASK, STATE, {"noise": seed_noise(7)})
    for chunk in by_noise.values():
        np.testing.assert_allclose(chunk, seeded, atol=SGLANG_TOLERANCE)
    other = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    same_chunk_through_sglang_doors(srv, frames(2), TASK, STATE, seed=0, noise=other)


def test_metadata_is_the_served_policy(pi05):
    with pi05.client() as c:
        meta = c.get("/v1/actions/metadata").json()
    assert meta["object"] == "action.metadata" and meta["policy_family"] == "pi05"
    assert meta["input"] == {
        "image_keys": ["base_0_rgb", "wrist_0_rgb"],
        "image_size": [28, 28],
        "state_dim": 4,
    }
    out = meta["output"]
    assert (out["action_horizon"], out["action_dim"], out["padded_action_dim"]) == (4, 3, 32)
    assert meta["defaults"]["num_inference_steps"] == 10
    norm = meta["normalization"]
    assert (norm["state"], norm["actions"], norm["state_mode"]) == ("server", "server", "QUANTILES")
    assert norm["client_normalized_field"] == "runtime.client_normalized"


def _generations(srv, payload: dict, **kw) -> dict:
    with srv.client() as c:
        r = c.post(GENERATIONS, json=payload, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def test_client_normalized_only_behind_its_field(pi05):
    """SGLang's convention (normalised state in, normalised actions out) on request; without the
    field, the same numbers are raw state, normalised by the node as on /v1/actions."""
    policy = detect(pi0_model_path("pi05", "bare")).policy()
    normalized = policy.state_norm.normalize(np.asarray(STATE, dtype=np.float32)).tolist()
    images = {n: {"b64_json": png_base64(f)} for n, f in frames().items()}
    flat = {"task": TASK, "images": images, "state": normalized, "seed": 3}
    asked = _generations(pi05, {**flat, "runtime": {"client_normalized": True}})
    got = np.asarray(asked["data"][0]["action"]["values"], dtype=np.float32)
    raw = v1_actions_chunk(pi05, frames(), TASK, STATE, seed=3)
    np.testing.assert_allclose(got, policy.action_norm.normalize(raw), atol=SGLANG_TOLERANCE)
    # SGLang's clients send a normalised state zero-padded (or short): it is padded here too.
    short = {**flat, "state": normalized[:3], "runtime": {"client_normalized": True}}
    padded = {**short, "state": [*normalized[:3], 0.0]}
    chunks = [_generations(pi05, p)["data"][0]["action"]["values"] for p in (short, padded)]
    assert chunks[0] == chunks[1]
    plain = _generations(pi05, flat)
    unasked = np.asarray(plain["data"][0]["action"]["values"], dtype=np.float32)
    expected = v1_actions_chunk(pi05, frames(), TASK, normalized, seed=3)
    np.testing.assert_allclose(unasked, expected, atol=SGLANG_TOLERANCE)


def _bad_payloads() -> dict[str, dict]:
    """Flat payloads, each wrong in the field it is keyed by."""
    good = {
        "task": TASK,
        "observation.images.base_0_rgb": sglang_tensor(random_rgb(8, 8, 1)),
        "observation.state": STATE,
    }
    return {
        "observation.images.base_0_rgb": {
            **good,
            "observation.images.base_0_rgb": {"b64_json": "bm90IGFuIGltYWdl"},
        },
        "observation.state": {**good, "observation.state": [1.0, 2.0]},
        "observation.images.cam_high": {**good, "observation.images.cam_high": [[[0, 0, 0]]]},
        "num_inference_steps": {**good, "num_inference_steps": 3},
        "observation.noise": {**good, "observation.noise": [[0.0] * 32] * 3},
        "runtime.response_format": {**good, "runtime": {"response_format": "video"}},
        "tokens": {**good, "tokens": [1, 2, 3]},
        "task": {k: v for k, v in good.items() if k != "task"},
        "prev_chunk": {**good, "prev_chunk": [[0.0] * 9], "inference_delay": 1},
    }


def _refused_over_http(srv, field: str, payload: dict, as_msgpack: bool) -> None:
    with srv.client() as c:
        if as_msgpack:
            headers = {"content-type": "application/msgpack"}
            r = c.post(GENERATIONS, content=msgpack_numpy.packb(payload), headers=headers)
        else:
            r = c.post(GENERATIONS, json=payload)
    assert r.status_code == 400, (field, r.text)
    assert r.json()["field"] == field and r.json()["detail"].startswith(f"{field}:"), r.text
    assert_nothing_left(srv)


def test_hostile_input_over_http_names_the_field(pi0):
    bad = _bad_payloads()
    for field, payload in bad.items():
        for as_msgpack in (False, True):
            _refused_over_http(pi0, field, payload, as_msgpack)
    envelope = {"input": {"task": TASK, "observation": {"state": [1.0]}}}
    _refused_over_http(pi0, "input.observation.state", envelope, False)
    with pi0.client() as c:
        r = c.post(GENERATIONS, content=b'{"task": ', headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["field"] == "body", r.text
        r = c.post(GENERATIONS, content=b"\xc1", headers={"content-type": "application/msgpack"})
        assert r.status_code == 400 and r.json()["field"] == "body", r.text
        text = c.get("/metrics").text
    assert b"413" in _announce_huge_body(pi0).split(b"\r\n", 1)[0]  # the node's body limit
    assert_nothing_left(pi0)
    refused = metric_sum(text, "vla_http_requests_total", route=GENERATIONS, status="400")
    assert refused == 2 * len(bad) + 3


def _announce_huge_body(srv) -> bytes:
    """The reply to a POST announcing 50 MB it never sends (refused before it is read)."""
    head = (
        f"POST {GENERATIONS} HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {50 * 2**20}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as sock:
        sock.sendall(head.encode())
        return sock.recv(65536)


def _ask(ws, frame: bytes | str) -> dict:
    ws.send(frame)
    return msgpack_numpy.unpackb(ws.recv(timeout=60))


@pytest.mark.parametrize("path", [REALTIME, OPENPI])
def test_hostile_frames_get_error_frames_and_the_socket_serves_on(pi0, path):
    url = f"ws://127.0.0.1:{pi0.port}{path}"
    bad = _bad_payloads()
    auth = {"Authorization": f"Bearer {KEY}"}
    with websockets.sync.client.connect(url, max_size=None, additional_headers=auth) as ws:
        assert msgpack.unpackb(ws.recv(timeout=60))["object"] == "action.metadata"
        for field, payload in bad.items():
            reply = _ask(ws, msgpack_numpy.packb(payload))
            assert reply["field"] == field and reply["error"].startswith(f"{field}:"), reply
        assert _ask(ws, b"\xc1 not msgpack")["field"] == "payload"
        assert _ask(ws, "a text frame")["field"] == "payload"
        big = {"task": TASK, "pad": np.zeros(MAX_FRAME, dtype=np.uint8)}
        assert "payload limit" in _ask(ws, msgpack_numpy.packb(big))["error"]
        assert_nothing_left(pi0)
        # SGLang's str-keyed array markers are read too; the socket still serves.
        image = random_rgb(8, 8, 1)
        marker = {"__ndarray__": True, "data": image.tobytes(), "dtype": "|u1", "shape": [8, 8, 3]}
        frame = {"task": TASK, "observation.images.base_0_rgb": marker, "state": STATE, "seed": 1}
        out = _ask(ws, msgpack.packb(frame, use_bin_type=True))
        assert "error" not in out, out
    with pi0.client() as c:
        text = c.get("/metrics").text
    refused = metric_sum(text, "vla_http_requests_total", route=path, status="400")
    assert refused == len(bad) + 3


def test_the_api_key_guards_every_door(pi0):
    with pi0.client() as c:
        c.headers.pop("Authorization")
        r = c.post(GENERATIONS, json={"task": TASK})
        assert r.status_code == 401 and c.get("/v1/actions/metadata").status_code == 401
    for path in (REALTIME, OPENPI):
        with pytest.raises(websockets.exceptions.InvalidHandshake):
            websockets.sync.client.connect(f"ws://127.0.0.1:{pi0.port}{path}").close()


def _replay(srv, record: dict) -> np.ndarray:
    """One recorded request, sent as its client sent it; the chunk as the client reads it."""
    body = base64.b64decode(record["body_base64"])
    if record["path"] == OPENPI:
        url = f"ws://127.0.0.1:{srv.port}{OPENPI}"
        with websockets.sync.client.connect(url, max_size=None) as ws:
            ws.recv(timeout=60)
            ws.send(body)
            out = msgpack_numpy.unpackb(ws.recv(timeout=60))
    else:
        headers = {"Content-Type": record["content_type"], "Accept": record["content_type"]}
        with srv.client() as c:
            r = c.post(GENERATIONS, content=body, headers=headers)
        assert r.status_code == 200, r.text
        out = (
            msgpack_numpy.unpackb(r.content) if "msgpack" in r.headers["content-type"] else r.json()
        )
    # The client's `_sglang_actions`: the raw dict's `actions`, else the envelope's values.
    values = out["actions"] if "actions" in out else out["data"][0]["action"]["values"]
    return np.asarray(values, dtype=np.float32)


def _tensor_value(t: dict) -> np.ndarray:
    return np.asarray(t["values"], dtype=t["dtype"]).reshape(t["shape"])


def test_sglang_clients_recorded_requests_get_the_v1_actions_chunk(pi05):
    records = json.loads(RECORDED.read_text())
    assert [r["mode"] for r in records] == ["http", "http_msgpack", "openpi_ws"]
    sent = json.loads(base64.b64decode(records[0]["body_base64"]))["input"]
    obs = sent["observation"]
    images = {name: _tensor_value(t) for name, t in obs["images"].items()}
    state = _tensor_value(obs["state"]).astype(np.float64).tolist()
    noise = _tensor_value(obs["noise"]).tolist()
    expected = v1_actions_chunk(pi05, images, sent["task"], state, noise=noise)
    for record in records:
        chunk = _replay(pi05, record)
        np.testing.assert_allclose(chunk, expected, atol=SGLANG_TOLERANCE, err_msg=record["mode"])
