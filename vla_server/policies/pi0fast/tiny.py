"""A tiny random-weight pi0-FAST checkpoint in LeRobot's exact folder layout, built offline.

The folder holds what `lerobot/pi0fast-*` folders hold, small: `config.json` (`"type":
"pi0_fast"`, two cameras, a 4-dim state, a 3-dim action, chunks of 4, and a `vlm_config`
describing a tiny PaliGemma: Gemma width 64, 2 layers, 4 query heads and 1 KV head of 16, SigLIP
width 32, 2 layers, 28 px images in 14 px patches = 4 tokens per camera), `model.safetensors`
with the keys `paligemma_with_expert.paligemma.{model.*, lm_head.weight}` (`layout="bare"`, as
base repositories) or the same under `model.` (`layout="prefixed"`, as fine-tuned ones), the
embedding tied to and saved only as `lm_head.weight`, the PaliGemma-like tokenizer in the root,
the FAST tokenizer in `fast_tokenizer/` (`pi0fast_tokenizers`), and LeRobot's pre/post
processor files with quantile statistics for the state and the action.

Weights are drawn with a fixed seed and a wide spread, so greedy choices have clear margins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vla_server.model.checkpoint_cache import cached_folder
from vla_server.policies.pi0fast.tiny_tokenizers import write_fast_tokenizer
from vla_server.policies.pi_common.paligemma_dims import MID, TINY, PaliGemmaDims
from vla_server.policies.pi_common.tiny_paligemma import (
    ACTION_DIM,
    CAMERAS,
    CHUNK,
    FAST_VOCAB,
    PREFIXES,
    SKIP,
    STATE_DIM,
    TEXT_BPE,
    lerobot_tensors,
    random_paligemma,
    vlm_config,
    write_json_file,
    write_processors,
)
from vla_server.policies.pi_common.tiny_text_tokenizer import build_text_tokenizer

MAX_DECODING_STEPS = 24
# The mid-size model's cap: a random model seldom ends its chunk early, so this is about the
# tokens each of its chunks takes (real pi0-FAST chunks take tens of tokens).
MID_DECODING_STEPS = 64
VERSION = 4


def _policy_config(
    vlm: dict[str, Any], dims: PaliGemmaDims = TINY, max_steps: int = MAX_DECODING_STEPS
) -> dict[str, Any]:
    size = dims.image_size
    visual = {"type": "VISUAL", "shape": [3, size, size]}
    return {
        "type": "pi0_fast",
        "n_obs_steps": 1,
        "input_features": {
            **{f"observation.images.{c}": visual for c in CAMERAS},
            "observation.state": {"type": "STATE", "shape": [STATE_DIM]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [ACTION_DIM]}},
        "normalization_mapping": {
            "VISUAL": "IDENTITY",
            "STATE": "QUANTILES",
            "ACTION": "QUANTILES",
        },
        "paligemma_variant": "gemma_2b",
        "dtype": "float32",
        "chunk_size": CHUNK,
        "n_action_steps": CHUNK,
        "max_state_dim": 32,
        "max_action_dim": 32,
        "image_resolution": [size, size],
        "tokenizer_max_length": 48,
        "max_decoding_steps": max_steps,
        "fast_skip_tokens": SKIP,
        "text_tokenizer_name": "google/paligemma-3b-pt-224",
        "action_tokenizer_name": "lerobot/fast-action-tokenizer",
        "vlm_config": vlm,
    }


def build_pi0fast(
    out: Path, layout: str = "bare", seed: int = 0, dims: PaliGemmaDims = TINY,
    max_steps: int = MAX_DECODING_STEPS,
) -> None:  # fmt: skip
    from safetensors.torch import save_file

    tokenizer = build_text_tokenizer(TEXT_BPE, FAST_VOCAB, SKIP)
    vlm = vlm_config(len(tokenizer), dims)
    model = random_paligemma(vlm, seed, dims.spread)
    save_file(lerobot_tensors(model, layout), str(out / "model.safetensors"))
    tokenizer.save_pretrained(out)
    write_fast_tokenizer(out / "fast_tokenizer", CHUNK, ACTION_DIM, FAST_VOCAB)
    write_json_file(out / "config.json", _policy_config(vlm, dims, max_steps))
    write_processors(out)


def pi0fast_model_path(layout: str = "bare", seed: int = 0) -> Path:
    """The tiny pi0-FAST folder, built into the checkpoint cache on first use."""
    if layout not in PREFIXES:
        raise ValueError(f"unknown layout {layout!r} (one of {', '.join(PREFIXES)})")
    name = f"tiny-pi0fast-v{VERSION}-{layout}-{seed}"
    return cached_folder(name, lambda out: build_pi0fast(out, layout, seed))


def mid_pi0fast_model_path(seed: int = 0) -> Path:
    """The mid-size pi0-FAST (`paligemma_dims.MID`'s backbone, LeRobot's layout, up to
    `MID_DECODING_STEPS` action tokens): what the speed benchmarks time."""
    name = f"mid-pi0fast-v{VERSION}-bare-{seed}"
    build = lambda out: build_pi0fast(out, "bare", seed, MID, MID_DECODING_STEPS)  # noqa: E731
    return cached_folder(name, build)
