"""The other Prismatic layouts OpenVLA-style checkpoints come in, each through the offline
`Engine` against the reference's `predict_action`: a single SigLIP, CLIP (QuickGELU) or IN1K
ViT-L/16 (196 patches) tower with the `gelu-mlp` projector, DINOv2 with a `linear` projector,
letterbox preprocessing, a sharded `model.safetensors.index.json`, and bf16 on the CPU (the
CLIP, IN1K, sharded and bf16 cases with `-m slow`)."""

from __future__ import annotations

import numpy as np
import pytest

import vla_server
from tests.support.images import png_base64, random_rgb
from tests.support.prismatic_ref.oracle_env import build_openvla_checkpoint, reference_predict

FRAMES = [random_rgb(224, 224, seed=11), random_rgb(360, 640, seed=12)]
INSTRUCTION = "put the carrot in the sink"
PROMPT = f"In: What action should the robot take to {INSTRUCTION}?\nOut:"
FUSED = {"backbone": "dinosiglip-vit-so-224px"}
SLOW = pytest.mark.slow  # each variant starts a node (about 10 s): the rarer ones are opt-in
VARIANTS = [
    pytest.param({"backbone": "siglip-vit-so400m", "arch_specifier": "gelu-mlp"}, id="siglip"),
    pytest.param({"backbone": "dinov2-vit-l", "arch_specifier": "no-align+linear"}, id="linear"),
    pytest.param({**FUSED, "resize_strategy": "letterbox"}, id="letterbox"),
    pytest.param({"backbone": "clip-vit-l", "arch_specifier": "gelu-mlp"}, id="clip", marks=SLOW),
    pytest.param({"backbone": "in1k-vit-l", "arch_specifier": "gelu-mlp"}, id="in1k", marks=SLOW),
    pytest.param({**FUSED, "sharded": True}, id="sharded", marks=SLOW),
]


def actions_of(path, **engine_args) -> list[tuple[list[int], list[float]]]:
    with vla_server.Engine(model_path=str(path), max_total_tokens=4096, **engine_args) as eng:
        outs = [
            eng.generate(
                text=PROMPT,
                image_data=png_base64(frame),
                num_actions=1,
                sampling_params={"temperature": 0},
            )
            for frame in FRAMES
        ]
    return [(out["output_ids"], out["actions"][0]) for out in outs]


def reference_of(path) -> list[dict]:
    requests = [{"image_png_b64": png_base64(f), "instruction": INSTRUCTION} for f in FRAMES]
    return reference_predict(path, requests)


@pytest.mark.parametrize("options", VARIANTS)
def test_variant_equals_predict_action(options):
    path = build_openvla_checkpoint(towers="tiny", norm_keys="bridge_orig", **options)
    for (tokens, actions), ref in zip(actions_of(path), reference_of(path), strict=True):
        assert tokens == ref["token_ids"]
        np.testing.assert_allclose(actions, ref["actions"], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_bf16_on_cpu_serves_actions():
    """bf16 runs on the CPU end to end. Its tokens are not compared with the float32 reference:
    the tiny checkpoint's top-2 logit margins (0.04 and up) are within bf16 rounding."""
    path = build_openvla_checkpoint(towers="tiny", norm_keys="bridge_orig", **FUSED)
    want = [t for ref in reference_of(path) for t in ref["token_ids"]]
    served = actions_of(path, dtype="bfloat16")
    tokens = [t for out, _ in served for t in out]
    assert len(tokens) == 14 and all(768 <= t < 1024 for t in tokens)
    assert all(np.isfinite(actions).all() and len(actions) == 7 for _, actions in served)
    print(f"bf16 tokens equal to the float32 reference: {sum(map(int.__eq__, tokens, want))}/14")
