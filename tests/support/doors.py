"""One denoised-chunk observation asked through several doors: `/v1/actions`, `/generate` with
`num_actions`, openpi's WebSocket client, and SGLang's action API (its HTTP route as JSON and as
msgpack, its two WebSockets). They must return the same chunk."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.images import png_base64
from tests.support.server import ServerProcess, post_actions

SGLANG_TOLERANCE = 1e-5


def same_chunk_through_three_doors(
    server: Any,
    frames: dict[str, np.ndarray],
    instruction: str,
    state: list[float],
    chunk: int,
    seed: int,
) -> dict[str, Any]:
    """Asserts the three chunks are equal (frames keyed by camera name, in camera order);
    returns `/generate`'s reply."""
    from openpi_client import websocket_client_policy

    images = {name: png_base64(frame) for name, frame in frames.items()}
    body = {"instruction": instruction, "image_data": images, "state": state, "seed": seed}
    expected = post_actions(server, body)["actions"]
    generate = {
        "text": instruction + "\n",  # /generate takes the prompt as written
        "image_data": list(images.values()),
        "num_actions": chunk,
        "state": state,
        "sampling_params": {"seed": seed},
    }
    with server.client() as c:
        r = c.post("/generate", json=generate)
    assert r.status_code == 200, r.text
    assert r.json()["actions"] == expected and r.json()["output_ids"] == []
    client = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", server.port)
    assert client.get_server_metadata()["action_horizon"] == chunk
    obs = {f"observation/{name}": frame for name, frame in frames.items()}
    out = client.infer({**obs, "state": np.asarray(state), "prompt": instruction, "seed": seed})
    np.testing.assert_array_equal(out["actions"], np.asarray(expected))
    return r.json()


def v1_actions_chunk(
    server: ServerProcess,
    frames: dict[str, np.ndarray],
    instruction: str,
    state: list[float],
    **extra: Any,
) -> np.ndarray:
    """`/v1/actions`' chunk for the frames (PNG, lossless), keyed by camera name."""
    images = {name: png_base64(frame) for name, frame in frames.items()}
    body = {"instruction": instruction, "image_data": images, "state": state, **extra}
    return np.asarray(post_actions(server, body)["actions"], dtype=np.float32)


def sglang_tensor(array: np.ndarray) -> dict[str, Any]:
    """SGLang's JSON tensor map (its bench's `_json_tensor`)."""
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": array.tolist()}


def sglang_json_images(frames: dict[str, np.ndarray]) -> dict[str, Any]:
    """The frames in SGLang's three JSON encodings, in turn: a nested HWC list, a tensor map,
    `b64_json` (a data: URL from the third camera on)."""
    forms = [
        lambda f: f.tolist(),
        sglang_tensor,
        lambda f: {"b64_json": "data:image/png;base64," + png_base64(f)},
    ]
    return {name: forms[i % 3](frame) for i, (name, frame) in enumerate(frames.items())}


def sglang_chunks(
    server: ServerProcess,
    frames: dict[str, np.ndarray],
    instruction: str,
    state: list[float],
    knobs: dict[str, Any],
) -> dict[str, np.ndarray]:
    """The chunk each SGLang door returns (`knobs`: `seed` or `noise`, in the observation)."""
    return {
        **_http_chunks(server, frames, instruction, state, knobs),
        **_socket_chunks(server, frames, instruction, state, knobs),
    }


def _http_chunks(
    server: ServerProcess, frames: dict, instruction: str, state: list[float], knobs: dict
) -> dict[str, np.ndarray]:
    """JSON (the envelope, SGLang's JSON image encodings) and msgpack (arrays, CHW for the
    first camera, the raw reply)."""
    from openpi_client import msgpack_numpy

    observation = {
        "images": sglang_json_images(frames),
        "state": sglang_tensor(np.asarray(state, dtype=np.float32)),
        **_json_knobs(knobs),
    }
    envelope = {
        "input": {"task": instruction, "observation": observation},
        "parameters": {"num_inference_steps": 10},
        "runtime": {"return_timing": True, "prefix_cache": True},
    }
    chw = {n: (f.transpose(2, 0, 1) if i == 0 else f) for i, (n, f) in enumerate(frames.items())}
    packed = {
        "input": {"task": instruction, "observation": {"images": chw, "state": np.asarray(state)}},
        "runtime": {"response_format": "raw"},
    }
    packed["input"]["observation"].update(knobs)
    with server.client() as c:
        r = c.post("/v1/actions/generations", json=envelope)
        assert r.status_code == 200, r.text
        chunk = np.asarray(r.json()["data"][0]["action"]["values"], dtype=np.float32)
        headers = {"content-type": "application/msgpack"}
        r = c.post("/v1/actions/generations", content=msgpack_numpy.packb(packed), headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/msgpack", r.text
    return {"http": chunk, "http_msgpack": np.asarray(msgpack_numpy.unpackb(r.content)["actions"])}


def _socket_chunks(
    server: ServerProcess, frames: dict, instruction: str, state: list[float], knobs: dict
) -> dict[str, np.ndarray]:
    """Both WebSockets, the flat form with `observation.images.<camera>` arrays."""
    from openpi_client import msgpack_numpy
    from websockets.sync.client import connect

    flat = {"task": instruction, "observation.state": np.asarray(state, dtype=np.float32), **knobs}
    flat.update({f"observation.images.{n}": f for n, f in frames.items()})
    auth = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    chunks = {}
    for path, name in (("/v1/actions/realtime", "realtime_ws"), ("/openpi/policy", "openpi_ws")):
        url = f"ws://127.0.0.1:{server.port}{path}"
        with connect(url, max_size=None, additional_headers=auth) as ws:
            assert msgpack_numpy.unpackb(ws.recv(timeout=60))["object"] == "action.metadata"
            ws.send(msgpack_numpy.packb(flat))
            out = msgpack_numpy.unpackb(ws.recv(timeout=60))
            assert "infer_ms" in out["server_timing"], out
        values = out["actions"] if name == "openpi_ws" else out["data"][0]["action"]["values"]
        assert isinstance(values, np.ndarray) and values.dtype == np.float32
        chunks[name] = values
    return chunks


def _json_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    return {k: sglang_tensor(v) if isinstance(v, np.ndarray) else v for k, v in knobs.items()}


def same_chunk_through_sglang_doors(
    server: ServerProcess,
    frames: dict[str, np.ndarray],
    instruction: str,
    state: list[float],
    seed: int,
    noise: np.ndarray | None = None,
) -> dict[str, float]:
    """Asserts every SGLang door's chunk equals `/v1/actions`' on the same observation and seed
    (or noise) within SGLANG_TOLERANCE; returns each door's max abs difference."""
    knobs: dict[str, Any] = {"seed": seed} if noise is None else {"noise": noise}
    plain = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in knobs.items()}
    expected = v1_actions_chunk(server, frames, instruction, state, **plain)
    diffs = {}
    for door, chunk in sglang_chunks(server, frames, instruction, state, knobs).items():
        assert chunk.shape == expected.shape, (door, chunk.shape)
        diffs[door] = float(np.abs(chunk - expected).max())
    assert max(diffs.values()) <= SGLANG_TOLERANCE, diffs
    return diffs
