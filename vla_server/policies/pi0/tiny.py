"""Tiny random-weight pi0 and pi0.5 checkpoints in LeRobot's and openpi's folder layouts.

The backbone, tokenizer, cameras, state/action sizes and statistics are the pi families'
shared tiny ones (`pi_common/tiny_paligemma.py`, `pi_common/tiny_text_tokenizer.py`):
PaliGemma with Gemma width 64, 2 layers, 4 query heads and 1 KV head of 16, SigLIP at 28 px =
4 tokens per camera, two cameras, a 4-dim state, a 3-dim action, max dims 32. The action
expert is a Gemma of width 32, MLP 64 and the backbone's depth and heads, described by a
`dit_config` (transformers' `PI0Config.dit_config`); chunks of 4, 10 Euler steps. Weights are
drawn with a fixed seed and a wide spread, so outputs are not near 0. `rtc_model_path(kind)`:
the variant real-time chunking is tested on (a chunk of 50, the flow matrices at half the
spread; see `RTC_FLOW_SPREAD`). `pi0_model_path(kind, "bare", robot="so100")`: the same model
for an SO-100-like arm (cameras `front` and `wrist`, a 6-dim state and action: 5 joints and the
gripper, statistics over the arm's ranges), what LeRobot's client is run against.

Layouts (`pi0_model_path(kind, layout)`):

* "bare": LeRobot's base repositories: `config.json` (`"type": "pi0"|"pi05"`), the openpi keys
  bare in `model.safetensors`, the policy pre/post processors with mean-std (pi0) or quantile
  (pi0.5) statistics;
* "prefixed": the same with every key under `model.` (fine-tuned repositories), plus the unused
  `paligemma_with_expert.gemma_expert.lm_head.weight`;
* "openpi": openpi's PyTorch conversion: bare keys with the unused expert `lm_head`, its small
  `config.json` (plus `vlm_config`, `dit_config`, `image_resolution`, `cameras`, which openpi's
  own files lack, to describe the tiny model) and `assets/tiny/norm_stats.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from vla_server.model.checkpoint_cache import cached_folder
from vla_server.policies.pi0.flow_keys import EXPERT_LM_HEAD, EXPERT_PREFIX, HEADS
from vla_server.policies.pi_common.paligemma_dims import MID, TINY, PaliGemmaDims, dims_named
from vla_server.policies.pi_common.tiny_paligemma import (
    FAST_VOCAB,
    IMAGE_SIZE,
    ROBOTS,
    SKIP,
    TEXT_BPE,
    TINY_ROBOT,
    TinyRobot,
    lerobot_tensors,
    random_paligemma,
    vlm_config,
    write_json_file,
    write_processors,
)
from vla_server.policies.pi_common.tiny_text_tokenizer import build_text_tokenizer

KINDS = ("pi0", "pi05")
LAYOUTS = ("bare", "prefixed", "openpi")
CHUNK = 4
FLOW_SPREAD = 0.2  # std of the flow matrices: wide, so outputs are not near 0
# Real-time chunking's variant: pi0's real chunk (room for RTC's delays and horizons), and half
# the spread: on the wide weights, guidance through the expert's Jacobian (the paper's `vjp`)
# is chaotic (a 1e-7 nudge of the noise moves the dense reference's chunk by up to 9e-4), so no
# two float32 implementations agree to 1e-4; at 0.1 the same nudge moves it by < 1e-6.
RTC_CHUNK, RTC_FLOW_SPREAD = 50, 0.1
MAX_DIM = 32
NUM_STEPS = 10
ASSET_ID = "tiny"
VERSION = 1


def dit_config(dims: PaliGemmaDims = TINY) -> dict[str, Any]:
    """The expert as a transformers Gemma config dict (`PI0Config.dit_config`): `dims`' width
    and MLP, the backbone's depth and heads."""
    return {
        "model_type": "gemma",
        "hidden_size": dims.expert_width,
        "num_hidden_layers": dims.text_layers,
        "intermediate_size": dims.expert_mlp,
        "num_attention_heads": dims.text_heads,
        "num_key_value_heads": dims.kv_heads,
        "head_dim": dims.head_dim,
        "hidden_act": "gelu_pytorch_tanh",
    }


def _shapes(kind: str, dims: PaliGemmaDims) -> dict[str, tuple[int, ...]]:
    """Every flow tensor (bare openpi name) and its shape."""
    d = dit_config(dims)
    w, mlp, heads_dim = d["hidden_size"], d["intermediate_size"], d["head_dim"]
    q, kv = d["num_attention_heads"] * heads_dim, d["num_key_value_heads"] * heads_dim
    out: dict[str, tuple[int, ...]] = {}
    norm = (
        {"weight": (w,)} if kind == "pi0" else {"dense.weight": (3 * w, w), "dense.bias": (3 * w,)}
    )
    for i in range(d["num_hidden_layers"]):
        layer = f"{EXPERT_PREFIX}model.layers.{i}."
        for name, shape in (("q_proj", (q, w)), ("k_proj", (kv, w)), ("v_proj", (kv, w)),
                            ("o_proj", (w, q))):  # fmt: skip
            out[f"{layer}self_attn.{name}.weight"] = shape
        for name, shape in (
            ("gate_proj", (mlp, w)),
            ("up_proj", (mlp, w)),
            ("down_proj", (w, mlp)),
        ):
            out[f"{layer}mlp.{name}.weight"] = shape
        for which in ("input_layernorm", "post_attention_layernorm"):
            out.update({f"{layer}{which}.{n}": s for n, s in norm.items()})
    out.update({f"{EXPERT_PREFIX}model.norm.{n}": s for n, s in norm.items()})
    head_in = {"state_proj": MAX_DIM, "action_in_proj": MAX_DIM, "action_out_proj": w,
               "action_time_mlp_in": 2 * w, "action_time_mlp_out": w, "time_mlp_in": w,
               "time_mlp_out": w}  # fmt: skip
    for head in HEADS[kind]:
        rows = MAX_DIM if head == "action_out_proj" else w
        out[f"{head}.weight"], out[f"{head}.bias"] = (rows, head_in[head]), (rows,)
    return out


def random_flow_tensors(
    kind: str, seed: int, spread: float = FLOW_SPREAD, dims: PaliGemmaDims = TINY
) -> dict[str, torch.Tensor]:
    """The expert and heads with wide random weights (std `spread`); norm offsets and biases
    narrower."""
    generator = torch.Generator().manual_seed(seed + 2)
    out = {}
    for name, shape in _shapes(kind, dims).items():
        noise = torch.randn(shape, generator=generator)
        out[name] = spread * noise if len(shape) >= 2 else 0.1 * noise
    return out


def _lerobot_config(
    kind: str, vlm: dict[str, Any], chunk: int, robot: TinyRobot, dims: PaliGemmaDims
) -> dict[str, Any]:
    size = dims.image_size
    visual = {"type": "VISUAL", "shape": [3, size, size]}
    mode = "MEAN_STD" if kind == "pi0" else "QUANTILES"
    return {
        "type": kind,
        "n_obs_steps": 1,
        "input_features": {
            **{f"observation.images.{c}": visual for c in robot.cameras},
            "observation.state": {"type": "STATE", "shape": [robot.state_dim]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [robot.action_dim]}},
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode},
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "dtype": "float32",
        "chunk_size": chunk,
        "n_action_steps": chunk,
        "max_state_dim": MAX_DIM,
        "max_action_dim": MAX_DIM,
        "num_inference_steps": NUM_STEPS,
        "min_period": 4e-3,
        "max_period": 4.0,
        "image_resolution": [size, size],
        "tokenizer_max_length": 48 if kind == "pi0" else 200,
        "vlm_config": vlm,
        "dit_config": dit_config(dims),
    }


def _openpi_config(vlm: dict[str, Any], chunk: int, robot: TinyRobot) -> dict[str, Any]:
    return {
        "action_dim": MAX_DIM,
        "action_horizon": chunk,
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "precision": "float32",
        "vlm_config": vlm,
        "dit_config": dit_config(),
        "image_resolution": [IMAGE_SIZE, IMAGE_SIZE],
        "cameras": list(robot.cameras),
    }


def _write_norm_stats(out: Path, robot: TinyRobot) -> None:
    folder = out / "assets" / ASSET_ID
    folder.mkdir(parents=True)
    stats = {"norm_stats": {"state": robot.state_stats, "actions": robot.action_stats}}
    (folder / "norm_stats.json").write_text(json.dumps(stats, indent=2) + "\n")


def build_pi0(
    out: Path, kind: str, layout: str, seed: int = 0, chunk: int = CHUNK,
    spread: float = FLOW_SPREAD, robot: TinyRobot = TINY_ROBOT, dims: PaliGemmaDims = TINY,
    device: str = "cpu", dtype: torch.dtype = torch.float32,
) -> None:  # fmt: skip
    """`device`: where the backbone's weights are drawn; `dtype`: what they are saved in."""
    from safetensors.torch import save_file

    tokenizer = build_text_tokenizer(TEXT_BPE, FAST_VOCAB, SKIP)
    vlm = vlm_config(len(tokenizer), dims)
    tensors = {**lerobot_tensors(random_paligemma(vlm, seed, dims.spread, device), "bare"),
               **random_flow_tensors(kind, seed, spread, dims)}  # fmt: skip
    tensors = {name: t.to(dtype).cpu() for name, t in tensors.items()}
    if layout != "bare":
        generator = torch.Generator().manual_seed(seed + 3)
        shape = (len(tokenizer), dims.expert_width)
        tensors[EXPERT_LM_HEAD] = torch.randn(shape, generator=generator)
    if layout == "prefixed":
        tensors = {"model." + name: tensor for name, tensor in tensors.items()}
    save_file(tensors, str(out / "model.safetensors"))
    tokenizer.save_pretrained(out)
    if layout == "openpi":
        write_json_file(out / "config.json", _openpi_config(vlm, chunk, robot))
        _write_norm_stats(out, robot)
    else:
        write_json_file(out / "config.json", _lerobot_config(kind, vlm, chunk, robot, dims))
        write_processors(out, "MEAN_STD" if kind == "pi0" else "QUANTILES", robot)


def pi0_model_path(
    kind: str, layout: str, seed: int = 0, chunk: int = CHUNK, spread: float = FLOW_SPREAD,
    robot: str = "tiny",
) -> Path:  # fmt: skip
    """The tiny pi0 ("pi0") or pi0.5 ("pi05") folder in `layout`, built into the checkpoint
    cache on first use; `chunk`: its chunk size, `spread`: the std of its flow matrices,
    `robot`: the robot it is for (`tiny_paligemma.ROBOTS`: "tiny", the shared tiny one, or
    "so100", an SO-100-like arm with two cameras and a 6-dim state and action)."""
    if kind not in KINDS or layout not in LAYOUTS or robot not in ROBOTS:
        raise ValueError(
            f"unknown kind {kind!r}, layout {layout!r} or robot {robot!r} (kinds: "
            f"{', '.join(KINDS)}; layouts: {', '.join(LAYOUTS)}; robots: {', '.join(ROBOTS)})"
        )
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    name = f"tiny-{kind}-v{VERSION}-{layout}-{seed}" + ("" if chunk == CHUNK else f"-chunk{chunk}")
    name += "" if spread == FLOW_SPREAD else f"-spread{spread}"
    name += "" if robot == "tiny" else f"-{robot}"
    build = lambda out: build_pi0(out, kind, layout, seed, chunk, spread, ROBOTS[robot])  # noqa: E731
    return cached_folder(name, build)


def mid_pi0_model_path(kind: str, seed: int = 0) -> Path:
    """The mid-size pi0 / pi0.5 (`paligemma_dims.MID`, LeRobot's layout): what the speed
    benchmarks time."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    name = f"mid-{kind}-v{VERSION}-bare-{seed}"
    build = lambda out: build_pi0(out, kind, "bare", seed, MID.chunk, MID.spread, dims=MID)  # noqa: E731
    return cached_folder(name, build)


def sized_pi0_model_path(kind: str, size: str, device: str = "cpu") -> Path:
    """The random pi0 / pi0.5 of `paligemma_dims` size `size` ("real": the released models'
    dimensions with a tiny vocabulary, drawn on `device` and saved in bfloat16; "mid"; "tiny"),
    LeRobot's layout, chunks of the size's."""
    dims = dims_named(size)
    if size == "tiny":
        return pi0_model_path(kind, "bare")
    if size == "mid":
        return mid_pi0_model_path(kind)
    name = f"{size}-{kind}-v{VERSION}-bare-0"
    return cached_folder(name, lambda out: build_pi0(
        out, kind, "bare", 0, dims.chunk, dims.spread, dims=dims, device=device,
        dtype=torch.bfloat16,
    ))  # fmt: skip


def rtc_model_path(kind: str) -> Path:
    """The real-time chunking variant (LeRobot's layout): a chunk of `RTC_CHUNK`, the flow
    matrices at `RTC_FLOW_SPREAD`, so that guidance through the Jacobian is well-conditioned."""
    return pi0_model_path(kind, "bare", chunk=RTC_CHUNK, spread=RTC_FLOW_SPREAD)
