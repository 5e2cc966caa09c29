"""A LeRobot `smolvla` checkpoint folder's configuration: its `config.json` (`"type":
"smolvla"`) and the SmolVLM2 backbone's `config.json`, found through `vlm_model_name`.

The backbone folder is `vlm_model_name` when that is a local folder (absolute, or relative to
the checkpoint folder), else `<checkpoint>/vlm`. Its weights are not needed: the policy's
`model.safetensors` holds every tensor; the backbone folder gives the dimensions and the
tokenizer.

Derived as LeRobot's `SmolVLMWithExpertModel` does: the text decoder cut to `num_vlm_layers`;
the action expert a copy of the text config at `int(width * expert_width_multiplier)` with
`get_intermediate_size` MLP and the same heads; expert layer i is a self (joint) attention layer
when `attention_mode` has no "cross" or `i % self_attn_every_n_layers == 0`, else it
cross-attends to VLM layer i's K/V.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoConfig

EMPTY_CAMERA = "observation.images.empty_camera_{}"
STATE_KEY = "observation.state"
ACTION_KEY = "action"
ROPE_BASE = 10_000.0  # LeRobot's `apply_rope` default; the backbone's rope_theta is ignored


@dataclass(frozen=True)
class VisionConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    image_size: int
    patch_size: int
    num_channels: int
    layer_norm_eps: float
    hidden_act: str


@dataclass(frozen=True)
class DecoderConfig:
    """A Llama stack's dimensions (the VLM's text decoder or the action expert)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    hidden_act: str

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim


@dataclass(frozen=True)
class SmolVLAConfig:
    folder: Path
    vlm_folder: Path
    vision: VisionConfig
    text: DecoderConfig  # already cut to num_vlm_layers
    expert: DecoderConfig
    vocab_size: int
    scale_factor: int
    expert_self_layers: tuple[bool, ...]  # per expert layer: joint self attention (else cross)
    camera_keys: tuple[str, ...]  # LeRobot's `image_features` order, empty cameras included
    empty_cameras: int
    state_dim: int
    action_dim: int
    max_state_dim: int
    max_action_dim: int
    chunk_size: int
    n_action_steps: int
    num_steps: int
    resize_with_padding: tuple[int, int] | None  # (width, height), LeRobot's order
    tokenizer_max_length: int
    pad_language_to: str
    add_image_special_tokens: bool
    min_period: float
    max_period: float

    @property
    def tokens_per_image(self) -> int:
        side = self.vision.image_size // self.vision.patch_size
        return (side // self.scale_factor) ** 2


def read_config(folder: str | Path) -> SmolVLAConfig:
    """The configuration of the LeRobot `smolvla` folder `folder`."""
    folder = Path(folder)
    raw = _read_json(folder / "config.json")
    if raw.get("type") != "smolvla":
        raise ValueError(f"{folder}/config.json is not a smolvla policy (type {raw.get('type')!r})")
    _check_supported(raw)
    vlm_folder = find_vlm_folder(folder, raw.get("vlm_model_name", ""))
    backbone = AutoConfig.from_pretrained(vlm_folder)
    text = _decoder(backbone.text_config, raw.get("num_vlm_layers", 16))
    expert = _expert(text, raw.get("expert_width_multiplier", 0.75))
    return SmolVLAConfig(
        folder=folder,
        vlm_folder=vlm_folder,
        vision=_vision(backbone.vision_config),
        text=text,
        expert=expert,
        vocab_size=backbone.text_config.vocab_size,
        scale_factor=backbone.scale_factor,
        expert_self_layers=_self_layers(raw, expert.num_layers),
        camera_keys=_camera_keys(raw),
        empty_cameras=raw.get("empty_cameras", 0),
        state_dim=_feature_dim(raw["input_features"], STATE_KEY),
        action_dim=_feature_dim(raw["output_features"], ACTION_KEY),
        max_state_dim=raw.get("max_state_dim", 32),
        max_action_dim=raw.get("max_action_dim", 32),
        chunk_size=raw.get("chunk_size", 50),
        n_action_steps=raw.get("n_action_steps", 50),
        num_steps=raw.get("num_steps", 10),
        resize_with_padding=_resize(raw.get("resize_imgs_with_padding", (512, 512))),
        tokenizer_max_length=raw.get("tokenizer_max_length", 48),
        pad_language_to=raw.get("pad_language_to", "longest"),
        add_image_special_tokens=raw.get("add_image_special_tokens", False),
        min_period=raw.get("min_period", 4e-3),
        max_period=raw.get("max_period", 4.0),
    )


def find_vlm_folder(folder: Path, vlm_model_name: str) -> Path:
    """The local SmolVLM2 folder (config + tokenizer) of the checkpoint in `folder`:
    `vlm_model_name` as a folder (absolute, or inside `folder`), else `folder/vlm`, else the
    hub id `vlm_model_name` in the local Hugging Face cache (never downloaded)."""
    # An absolute vlm_model_name replaces `folder` in the join.
    candidates = [folder / vlm_model_name] if vlm_model_name else []
    candidates.append(folder / "vlm")
    cached = _hub_cache_folder(vlm_model_name)
    if cached is not None:
        candidates.append(cached)
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate
    raise FileNotFoundError(
        f"no local SmolVLM2 folder for {folder}: vlm_model_name {vlm_model_name!r} is neither "
        f"a folder nor in the local Hugging Face cache, and {folder / 'vlm'} does not exist "
        "(it needs config.json and the tokenizer)"
    )


def _hub_cache_folder(repo_id: str) -> Path | None:
    """The cached snapshot of hub id `repo_id`, looked up offline; None if it is not cached."""
    if not repo_id or repo_id.count("/") != 1 or Path(repo_id).is_absolute():
        return None
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 (not cached, or not a valid id: either way not found)
        return None


def _check_supported(raw: dict[str, Any]) -> None:
    # LeRobot itself fails at inference when the expert is shallower than the VLM (its joint
    # layers concatenate an empty list), and the ALOHA adapters are not ported here.
    n_expert, n_vlm = raw.get("num_expert_layers", -1), raw.get("num_vlm_layers", 16)
    if n_expert > 0 and n_expert != n_vlm:
        raise NotImplementedError(f"num_expert_layers {n_expert} != num_vlm_layers {n_vlm}")
    for flag in ("adapt_to_pi_aloha", "use_delta_joint_actions_aloha"):
        if raw.get(flag, False):
            raise NotImplementedError(f"{flag} is not supported")
    if raw.get("n_obs_steps", 1) != 1:
        raise NotImplementedError("n_obs_steps must be 1")


def _vision(c: Any) -> VisionConfig:
    return VisionConfig(
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads,
        image_size=c.image_size,
        patch_size=c.patch_size,
        num_channels=c.num_channels,
        layer_norm_eps=c.layer_norm_eps,
        hidden_act=c.hidden_act,
    )


def _decoder(c: Any, num_vlm_layers: int) -> DecoderConfig:
    layers = c.num_hidden_layers
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return DecoderConfig(
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_layers=min(num_vlm_layers, layers) if num_vlm_layers > 0 else layers,
        num_heads=c.num_attention_heads,
        num_kv_heads=c.num_key_value_heads,
        head_dim=head_dim,
        rms_norm_eps=c.rms_norm_eps,
        hidden_act=c.hidden_act,
    )


def expert_intermediate_size(width: int, multiplier: int = 4, multiple_of: int = 256) -> int:
    """LeRobot's `get_intermediate_size`: 4 * int(2w/3), rounded up to a multiple of 256."""
    hidden = multiplier * int(2 * width / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _expert(text: DecoderConfig, width_multiplier: float) -> DecoderConfig:
    width = int(text.hidden_size * width_multiplier)
    return DecoderConfig(
        hidden_size=width,
        intermediate_size=expert_intermediate_size(width),
        num_layers=text.num_layers,
        num_heads=text.num_heads,
        num_kv_heads=text.num_kv_heads,
        head_dim=text.head_dim,
        rms_norm_eps=text.rms_norm_eps,
        hidden_act=text.hidden_act,
    )


def _self_layers(raw: dict[str, Any], num_layers: int) -> tuple[bool, ...]:
    cross = "cross" in raw.get("attention_mode", "cross_attn")
    every = raw.get("self_attn_every_n_layers", 2)
    return tuple(not cross or (every > 0 and i % every == 0) for i in range(num_layers))


def _camera_keys(raw: dict[str, Any]) -> tuple[str, ...]:
    # LeRobot's `validate_features` appends the empty cameras to `input_features` (a saved
    # config may already list them); `image_features` keeps the dict's order.
    keys = [k for k, f in raw["input_features"].items() if f["type"] == "VISUAL"]
    for i in range(raw.get("empty_cameras", 0)):
        if EMPTY_CAMERA.format(i) not in keys:
            keys.append(EMPTY_CAMERA.format(i))
    if not keys:
        raise ValueError("the policy has no VISUAL input feature")
    return tuple(keys)


def _feature_dim(features: dict[str, Any], key: str) -> int:
    if key not in features:
        raise ValueError(f"config.json has no {key!r} feature")
    return int(features[key]["shape"][0])


def _resize(value: Any) -> tuple[int, int] | None:
    return None if value is None else (int(value[0]), int(value[1]))


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
