"""A tiny random SmolVLA checkpoint in LeRobot's folder layout, deterministic from a seed.

    folder/config.json                       "type": "smolvla", every field LeRobot 0.6 saves
    folder/model.safetensors                 the policy's tensors, `model.`-prefixed (LeRobot's
                                             save) or bare; lm_head and the VLM's final norm
                                             included as LeRobot saves them
    folder/policy_preprocessor.json          rename, batch, newline, tokenizer, device, normalizer
    folder/policy_preprocessor_step_5_normalizer_processor.safetensors
    folder/policy_postprocessor.json         unnormalizer, device
    folder/policy_postprocessor_step_0_unnormalizer_processor.safetensors
    folder/vlm/                              tiny SmolVLM2 config + tokenizer (`tiny_vlm.py`)

`vlm_model_name` is "vlm", a path relative to the checkpoint folder (LeRobot resolves it
against its working directory). The sizes: vision width 32 x 2 layers at 32 px / 4 px patches
(8 x 8 grid, 16 tokens per image after the 2x pixel shuffle); text width 64, 4 heads, 2 KV heads
of 16, 6 layers of which `num_vlm_layers` 4 are kept; expert width 48 (x 0.75), MLP 256; chunks
of 10 in 10 steps; 6-dim state and action; instructions padded to 16 tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from vla_server.model.checkpoint_cache import cached_folder
from vla_server.policies.smolvla.config import EMPTY_CAMERA, read_config
from vla_server.policies.smolvla.model import SmolVLA
from vla_server.policies.smolvla.tiny_vlm import IMAGE_SIZE, write_vlm_folder
from vla_server.policies.smolvla.weights import UNUSED, checkpoint_name

CAMERAS = ("observation.images.camera1", "observation.images.camera2")
STATE_DIM = ACTION_DIM = 6
CHUNK = 10
NUM_VLM_LAYERS = 4
MAX_TEXT_TOKENS = 16
NORMALIZER = "policy_preprocessor_step_5_normalizer_processor.safetensors"
UNNORMALIZER = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
NORM_MAP = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
VERSION = 1  # bump when the tiny folder's contents change (the cache keys on it)


@dataclass(frozen=True)
class TinySpec:
    seed: int = 0
    prefixed: bool = True  # keys under `model.` as LeRobot saves them; else bare
    mixed_dtypes: bool = False  # VLM + expert in bfloat16, heads and cross k/v float32
    empty_cameras: int = 0
    add_image_special_tokens: bool = False
    cameras: tuple[str, ...] = CAMERAS


def build_tiny_smolvla(folder: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write the tiny checkpoint described by `spec` into `folder` (created); returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_vlm_folder(folder / "vlm")
    features = _features(spec)
    _write_json(folder / "config.json", policy_config(spec, features))
    generator = torch.Generator().manual_seed(spec.seed)
    _write_processors(folder, features, generator)
    config = read_config(folder)
    with torch.device("meta"):
        shapes = {n: tuple(t.shape) for n, t in SmolVLA(config).state_dict().items()}
    tensors = random_tensors({checkpoint_name(n): s for n, s in shapes.items()}, vocab, generator)
    if spec.mixed_dtypes:
        tensors = _mixed(tensors, config.expert_self_layers)
    prefix = "model." if spec.prefixed else ""
    stored = {prefix + k: v.contiguous() for k, v in tensors.items()}
    save_file(stored, folder / "model.safetensors")
    return folder


def smolvla_model_path(seed: int = 0, empty_cameras: int = 0) -> Path:
    """The tiny folder (`TinySpec(seed, empty_cameras=...)`: two cameras, `model.`-prefixed
    keys), built into the checkpoint cache on first use."""
    spec = TinySpec(seed=seed, empty_cameras=empty_cameras)
    name = f"tiny-smolvla-v{VERSION}-{seed}" + (f"-empty{empty_cameras}" if empty_cameras else "")
    return cached_folder(name, lambda out: build_tiny_smolvla(out, spec))


def random_tensors(
    shapes: dict[str, tuple[int, ...]], vocab: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Weights with a spread wide enough that outputs are far from 0; plus LeRobot's unused."""
    width = shapes["vlm_with_expert.vlm.model.text_model.embed_tokens.weight"][1]
    shapes = {**shapes, UNUSED[0]: (vocab, width), UNUSED[1]: (width,)}
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        noise = torch.randn(shape, generator=generator)
        if "norm" in name and name.endswith("weight"):
            out[name] = 1.0 + 0.1 * noise  # LayerNorm / RMSNorm gains
        elif name.endswith("bias"):
            out[name] = 0.1 * noise
        elif "embed" in name and len(shape) == 2:
            out[name] = 0.5 * noise  # token and position embeddings
        else:
            fan_in = int(torch.tensor(shape[1:]).prod())
            out[name] = noise / fan_in**0.5
    return out


def _mixed(
    tensors: dict[str, torch.Tensor], self_layers: tuple[bool, ...]
) -> dict[str, torch.Tensor]:
    """LeRobot's dtypes: the VLM and expert in bfloat16 except the cross layers' k/v."""
    float32 = {
        f"vlm_with_expert.lm_expert.layers.{i}.self_attn.{p}_proj.weight"
        for i, is_self in enumerate(self_layers)
        if not is_self
        for p in ("k", "v")
    }
    return {
        k: v.to(torch.bfloat16) if k.startswith("vlm_with_expert.") and k not in float32 else v
        for k, v in tensors.items()
    }


def _features(spec: TinySpec) -> dict[str, dict[str, Any]]:
    features = {"observation.state": {"type": "STATE", "shape": [STATE_DIM]}}
    for key in spec.cameras:
        features[key] = {"type": "VISUAL", "shape": [3, 48, 64]}
    # What LeRobot's validate_features adds before saving.
    for i in range(spec.empty_cameras):
        features[EMPTY_CAMERA.format(i)] = {"type": "VISUAL", "shape": [3, 480, 640]}
    features["action"] = {"type": "ACTION", "shape": [ACTION_DIM]}
    return features


def policy_config(spec: TinySpec, features: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """config.json as LeRobot 0.6.1's `SmolVLAConfig` saves it, tiny values."""
    inputs = {k: v for k, v in features.items() if k != "action"}
    return {
        "type": "smolvla",
        "n_obs_steps": 1,
        "input_features": inputs,
        "output_features": {"action": features["action"]},
        "device": "cpu",
        "use_amp": False,
        "use_peft": False,
        "push_to_hub": False,
        "repo_id": None,
        "private": None,
        "tags": None,
        "license": None,
        "pretrained_path": None,
        "pretrained_revision": None,
        "chunk_size": CHUNK,
        "n_action_steps": CHUNK,
        "normalization_mapping": NORM_MAP,
        "max_state_dim": 32,
        "max_action_dim": 32,
        "resize_imgs_with_padding": [IMAGE_SIZE, IMAGE_SIZE],
        "empty_cameras": spec.empty_cameras,
        "adapt_to_pi_aloha": False,
        "use_delta_joint_actions_aloha": False,
        "tokenizer_max_length": MAX_TEXT_TOKENS,
        "num_steps": 10,
        "use_cache": True,
        **_training_fields(),
        "vlm_model_name": "vlm",
        "load_vlm_weights": False,
        "add_image_special_tokens": spec.add_image_special_tokens,
        "attention_mode": "cross_attn",
        "prefix_length": 0,
        "pad_language_to": "max_length",
        "num_expert_layers": 0,
        "num_vlm_layers": NUM_VLM_LAYERS,
        "self_attn_every_n_layers": 2,
        "expert_width_multiplier": 0.75,
        "min_period": 0.004,
        "max_period": 4.0,
        "rtc_config": None,
        "compile_model": False,
        "compile_mode": "max-autotune",
    }


def _training_fields() -> dict[str, Any]:
    return {
        "freeze_vision_encoder": True,
        "train_expert_only": True,
        "train_state_proj": True,
        "optimizer_lr": 0.0001,
        "optimizer_betas": [0.9, 0.95],
        "optimizer_eps": 1e-08,
        "optimizer_weight_decay": 1e-10,
        "optimizer_grad_clip_norm": 10,
        "scheduler_warmup_steps": 1000,
        "scheduler_decay_steps": 30000,
        "scheduler_decay_lr": 2.5e-06,
    }


def _write_processors(
    folder: Path, features: dict[str, dict[str, Any]], generator: torch.Generator
) -> None:
    stats = {}
    for key, dim in (("observation.state", STATE_DIM), ("action", ACTION_DIM)):
        stats[f"{key}.mean"] = torch.randn(dim, generator=generator)
        stats[f"{key}.std"] = 0.5 + torch.rand(dim, generator=generator)
    save_file(stats, folder / NORMALIZER)
    save_file(stats, folder / UNNORMALIZER)
    device = {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}
    tokenizer = {
        "max_length": MAX_TEXT_TOKENS,
        "task_key": "task",
        "padding_side": "right",
        "padding": "max_length",
        "truncation": True,
        "tokenizer_name": "vlm",
    }
    pre = [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        {"registry_name": "smolvla_new_line_processor", "config": {}},
        {"registry_name": "tokenizer_processor", "config": tokenizer},
        device,
        _norm_step("normalizer_processor", features, NORMALIZER),
    ]
    actions = {"action": features["action"]}
    post = [_norm_step("unnormalizer_processor", actions, UNNORMALIZER), device]
    for name, steps in (("policy_preprocessor", pre), ("policy_postprocessor", post)):
        _write_json(folder / f"{name}.json", {"name": name, "steps": steps})


def _norm_step(name: str, features: dict[str, Any], state_file: str) -> dict[str, Any]:
    config = {"eps": 1e-08, "features": features, "norm_map": NORM_MAP}
    return {"registry_name": name, "config": config, "state_file": state_file}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=4)
        f.write("\n")
