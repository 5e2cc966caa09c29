"""openvla-7b's real towers: DINOv2 ViT-L/14 with registers and SigLIP so400m/14 at their
published sizes (random bf16 weights, 1.5 GB), with the tiny Llama, served in float32 against
the reference's `predict_action`. Slow: `pytest -m slow` (about 2 minutes on 2 cores, the
first run adds the 35 s build)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.images import png_base64, random_rgb
from tests.support.prismatic_ref.oracle_env import build_openvla_checkpoint, reference_predict
from tests.support.server import run_server
from vla_server.config import default_torch_threads

pytestmark = pytest.mark.slow

FULL = {
    "backbone": "dinosiglip-vit-so-224px",
    "towers": "full",
    "dtype": "bfloat16",
    "norm_keys": "bridge_orig,fractal20220817_data",
}
FRAMES = [random_rgb(480, 640, seed=21), random_rgb(224, 224, seed=22)]
CASES = [
    (0, "pick up the red block", "bridge_orig"),
    (1, "open the drawer", "fractal20220817_data"),
]


def test_real_size_towers_equal_predict_action(tmp_path):
    path = build_openvla_checkpoint(**FULL)
    requests = [
        {"image_png_b64": png_base64(FRAMES[f]), "instruction": text, "unnorm_key": key}
        for f, text, key in CASES
    ]
    # as many CPU threads as the node's model, so the printed times compare like with like
    reference = reference_predict(path, requests, threads=default_torch_threads())
    with run_server(path, tmp_path, "--dtype", "float32") as server, server.client() as c:
        for (frame, text, key), ref in zip(CASES, reference, strict=True):
            body = {
                "instruction": text,
                "image_data": png_base64(FRAMES[frame]),
                "unnorm_key": key,
                "return_token_ids": True,
            }
            r = c.post("/v1/actions", json=body, timeout=300)
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["action_token_ids"][0] == ref["token_ids"]
            np.testing.assert_allclose(out["actions"][0], ref["actions"], rtol=0, atol=1e-5)
            print(
                f"{text}: node {out['timing']['time_to_first_action_ms']:.0f} ms, "
                f"reference {ref['first_action_ms']:.0f} ms to the first action"
            )
