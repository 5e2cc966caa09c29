"""One denoised-chunk observation asked through three doors: `/v1/actions`, `/generate` with
`num_actions`, and openpi's WebSocket client. They must return the same chunk."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.images import png_base64
from tests.support.server import post_actions


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
