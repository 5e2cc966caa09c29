"""What the engine needs to know about a checkpoint's decoder, read from its Hugging Face folder.

`transformers`' config classes parse `config.json` so that fields a checkpoint leaves out get
the same defaults the reference implementation uses, and old `rope_scaling` dicts are
standardised into `rope_parameters`. Everything downstream reads only `ModelConfig`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from vla_server.model.lerobot_config import (
    LEROBOT_PI_TYPES,
    LeRobotPolicySpec,
    read_lerobot_config,
)
from vla_server.model.paligemma_config import expert_config, paligemma_config
from vla_server.model.prismatic_config import PRISMATIC_MODEL_TYPES

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")
_DECODER_TYPES = ("llama", "qwen2", "gemma")
# MLP activations by config name: SiLU (Llama, Qwen2), tanh-approximate GELU (Gemma).
_ACTIVATIONS = ("silu", "gelu_pytorch_tanh")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # e.g. "LlamaForCausalLM", "LlavaForConditionalGeneration"
    decoder_type: str  # "llama", "qwen2" or "gemma"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    # Standardised RoPE parameters ("rope_type" plus its own keys), None for plain RoPE.
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    eos_token_ids: tuple[int, ...]
    dtype: torch.dtype
    is_multimodal: bool = False
    # "llava", "prismatic" (OpenVLA) or "paligemma" (pi-family policies): which vision encoder
    # and image layout; None: text only.
    vision_format: str | None = None
    # Gemma's differences from Llama: the GeGLU activation, RMSNorm scaling by (1 + w) in
    # float32, and token embeddings scaled by sqrt(hidden_size) (image embeddings are not).
    hidden_act: str = "silu"
    norm_unit_offset: bool = False
    embed_scale: float = 1.0
    # PaliGemma: each request's prompt prefix is attended bidirectionally (prefix-LM); its
    # cached K/V are only reusable for an identical prefix.
    prefix_lm: bool = False
    image_token_id: int | None = None
    # The vision tower's config.json section, for the vision loader (None for text-only models).
    vision_config: dict[str, Any] | None = None
    # The whole top-level config.json, for readers of keys this class does not model (an openpi
    # conversion folder: the LeRobot policy config that describes it, `openpi_config.py`).
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def context_len(self) -> int:
        return self.max_position_embeddings

    def differences(self, other: ModelConfig) -> list[str]:
        """Fields, other than token ids and dtype, in which `other` describes a different model."""
        return [
            f"{f.name}: {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
            for f in fields(self)
            if f.name not in _NOT_ARCHITECTURE and getattr(self, f.name) != getattr(other, f.name)
        ]


_NOT_ARCHITECTURE = ("eos_token_ids", "dtype", "raw", "vision_config", "image_token_id")


def load_model_config(model_path: str | Path) -> ModelConfig:
    path = Path(model_path)
    raw = read_lerobot_config(path) or json.loads((path / "config.json").read_text())
    hf, text, vision_format = _hf_configs(path, raw)
    # A LeRobot policy names its kind in "type" (e.g. "pi0_fast").
    architecture = (raw.get("architectures") or [raw.get("type") or type(hf).__name__])[0]
    decoder_type = text.model_type
    if decoder_type not in _DECODER_TYPES:
        raise NotImplementedError(
            f"{architecture}: decoder model_type {decoder_type!r} is not supported "
            f"(supported: {', '.join(_DECODER_TYPES)})"
        )
    is_multimodal = vision_format is not None
    gemma = decoder_type == "gemma"
    return ModelConfig(
        architecture=architecture,
        decoder_type=decoder_type,
        vocab_size=text.vocab_size,
        **_decoder_dimensions(text),
        max_position_embeddings=text.max_position_embeddings,
        tie_word_embeddings=bool(hf.tie_word_embeddings),
        qkv_bias=decoder_type == "qwen2" or bool(getattr(text, "attention_bias", False)),
        o_bias=decoder_type == "llama" and bool(getattr(text, "attention_bias", False)),
        eos_token_ids=_eos_token_ids(path, raw, text if vision_format == "paligemma" else None),
        dtype=_config_dtype(raw),
        is_multimodal=is_multimodal,
        vision_format=vision_format,
        image_token_id=getattr(hf, "image_token_id", None) if is_multimodal else None,
        vision_config=_vision_config(hf, raw, vision_format),
        hidden_act=getattr(text, "hidden_act", "silu"),
        norm_unit_offset=gemma,
        embed_scale=float(text.hidden_size) ** 0.5 if gemma else 1.0,
        prefix_lm=vision_format == "paligemma",
        raw=raw,
    )


def expert_model_config(backbone: ModelConfig, spec: LeRobotPolicySpec) -> ModelConfig:
    """A pi0 / pi0.5 action expert as a decoder config: its own Gemma dimensions, norm and RoPE
    settings, the backbone's everything else. Its layer l attends to the backbone's layer-l K/V,
    so depth, KV heads and head size must be the backbone's (openpi asserts the same)."""
    text = expert_config(spec)
    expert = replace(
        backbone,
        architecture="gemma_expert",
        **_decoder_dimensions(text),
        hidden_act=getattr(text, "hidden_act", "gelu_pytorch_tanh"),
        embed_scale=1.0,
        is_multimodal=False,
        vision_format=None,
        vision_config=None,
        prefix_lm=False,
    )
    for name in ("num_layers", "num_kv_heads", "head_dim"):
        if getattr(expert, name) != getattr(backbone, name):
            raise ValueError(
                f"the action expert's {name} ({getattr(expert, name)}) must equal the "
                f"backbone's ({getattr(backbone, name)})"
            )
    return expert


def _decoder_dimensions(text: Any) -> dict[str, Any]:
    """The `ModelConfig` fields of a supported transformers decoder config's sizes, norm and
    RoPE."""
    _check_supported(text)
    rope = _rope_parameters(text)
    return {
        "hidden_size": text.hidden_size,
        "intermediate_size": text.intermediate_size,
        "num_layers": text.num_hidden_layers,
        "num_heads": text.num_attention_heads,
        "num_kv_heads": text.num_key_value_heads or text.num_attention_heads,
        "head_dim": getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        "rms_norm_eps": text.rms_norm_eps,
        "rope_theta": float(rope["rope_theta"]),
        "rope_scaling": None if rope["rope_type"] == "default" else rope,
    }


def _vision_config(hf: Any, raw: dict[str, Any], vision_format: str | None) -> Any:
    if vision_format == "llava":
        return raw.get("vision_config")
    if vision_format == "paligemma":
        return hf.vision_config.to_dict()
    return None


def _hf_configs(path: Path, raw: dict[str, Any]) -> tuple[Any, Any, str | None]:
    """(top-level config, decoder config, vision format) parsed by `transformers`' classes.

    A Prismatic/OpenVLA folder names remote code in `auto_map`; it is never run: the decoder's
    `text_config` is parsed by the `transformers` class of its own `model_type`. A LeRobot
    pi-family folder (`"type"` instead of `model_type`) describes a PaliGemma backbone.
    """
    from transformers import AutoConfig

    if raw.get("model_type") in PRISMATIC_MODEL_TYPES:
        text = prismatic_text_config(raw)
        return text, text, "prismatic"
    if raw.get("type") in LEROBOT_PI_TYPES:
        hf = paligemma_config(LeRobotPolicySpec.from_config(raw))
        return hf, hf.text_config, "paligemma"
    hf = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    text = getattr(hf, "text_config", None)
    return hf, text or hf, None if text is None else "llava"


def prismatic_text_config(raw: dict[str, Any]) -> Any:
    """The decoder config of a Prismatic/OpenVLA `config.json`: its `text_config` (which holds
    only what differs from the defaults) parsed by the class of its `model_type`."""
    from transformers import CONFIG_MAPPING

    text_raw = dict(raw.get("text_config") or {})
    text_type = text_raw.pop("model_type", "llama")
    if text_type not in CONFIG_MAPPING:
        raise NotImplementedError(f"text_config model_type {text_type!r} is not known")
    return CONFIG_MAPPING[text_type](**text_raw)


def _check_supported(text: Any) -> None:
    act = getattr(text, "hidden_act", "silu")
    if act not in _ACTIVATIONS:
        raise NotImplementedError(
            f"hidden_act {act!r} is not supported ({', '.join(_ACTIVATIONS)})"
        )
    if getattr(text, "mlp_bias", False):
        raise NotImplementedError("mlp_bias=True is not supported")
    layer_types = getattr(text, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        raise NotImplementedError("sliding-window attention layers are not supported")


def _rope_parameters(text: Any) -> dict[str, Any]:
    text.standardize_rope_params()
    rope = dict(text.rope_parameters or {})
    rope.setdefault("rope_theta", getattr(text, "rope_theta", None) or text.default_theta)
    rope_type = rope.setdefault("rope_type", rope.pop("type", "default"))
    rope.pop("type", None)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        supported = ", ".join(SUPPORTED_ROPE_TYPES)
        raise NotImplementedError(f"rope_type {rope_type!r} is not supported ({supported})")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise NotImplementedError("partial_rotary_factor != 1 is not supported")
    return rope


def _eos_token_ids(path: Path, raw: dict[str, Any], text: Any = None) -> tuple[int, ...]:
    """EOS ids from config.json, its text_config, generation_config.json and (a LeRobot
    folder, whose config.json has none) the parsed decoder config `text`."""
    sources = [raw, raw.get("text_config") or {}]
    if text is not None:
        sources.append({"eos_token_id": text.eos_token_id})
    gen_path = path / "generation_config.json"
    if gen_path.exists():
        sources.append(json.loads(gen_path.read_text()))
    ids: list[int] = []
    for source in sources:
        value = source.get("eos_token_id")
        for token_id in value if isinstance(value, list) else [value]:
            if isinstance(token_id, int) and token_id not in ids:
                ids.append(token_id)
    return tuple(ids)


def _config_dtype(raw: dict[str, Any]) -> torch.dtype:
    name = raw.get("dtype") or raw.get("torch_dtype")
    if name is None:
        name = (raw.get("text_config") or {}).get("dtype") or "float32"
    return _DTYPES.get(str(name).removeprefix("torch."), torch.float32)


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype.removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported (use one of {', '.join(_DTYPES)})")
    return _DTYPES[name]
