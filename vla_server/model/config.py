"""What the engine needs to know about a checkpoint's decoder, read from its Hugging Face folder.

`transformers`' config classes parse `config.json` so that fields a checkpoint leaves out get
the same defaults the reference implementation uses, and old `rope_scaling` dicts are
standardised into `rope_parameters`. Everything downstream reads only `ModelConfig`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

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
    # Gemma's differences from Llama: the GeGLU activation, RMSNorm scaling by (1 + w) in
    # float32, and token embeddings scaled by sqrt(hidden_size) (image embeddings are not).
    hidden_act: str = "silu"
    norm_unit_offset: bool = False
    embed_scale: float = 1.0
    # Prefix-LM backbones: each request's prompt prefix is attended bidirectionally (prefix-LM); its
    # cached K/V are only reusable for an identical prefix.
    prefix_lm: bool = False
    # The placeholder id a prompt writes per image (None: images have no placeholder token).
    image_token_id: int | None = None

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


_NOT_ARCHITECTURE = ("eos_token_ids", "dtype", "image_token_id")


def model_config(
    path: Path,
    raw: dict[str, Any],
    hf: Any,
    text: Any,
    *,
    architecture: str,
    prefix_lm: bool = False,
    image_token_id: int | None = None,
    eos_from_text: bool = False,
) -> ModelConfig:
    """A checkpoint's `ModelConfig` from its config.json `raw`, its parsed transformers config
    `hf` and decoder config `text` (the family parses them its way). `eos_from_text`: the
    decoder config's EOS counts too (a LeRobot folder's config.json names none)."""
    decoder_type = text.model_type
    if decoder_type not in _DECODER_TYPES:
        raise NotImplementedError(
            f"{architecture}: decoder model_type {decoder_type!r} is not supported "
            f"(supported: {', '.join(_DECODER_TYPES)})"
        )
    gemma = decoder_type == "gemma"
    return ModelConfig(
        architecture=architecture,
        decoder_type=decoder_type,
        vocab_size=text.vocab_size,
        **decoder_dimensions(text),
        max_position_embeddings=text.max_position_embeddings,
        tie_word_embeddings=bool(hf.tie_word_embeddings),
        qkv_bias=decoder_type == "qwen2" or bool(getattr(text, "attention_bias", False)),
        o_bias=decoder_type == "llama" and bool(getattr(text, "attention_bias", False)),
        eos_token_ids=_eos_token_ids(path, raw, text if eos_from_text else None),
        dtype=_config_dtype(raw),
        image_token_id=image_token_id,
        hidden_act=getattr(text, "hidden_act", "silu"),
        norm_unit_offset=gemma,
        embed_scale=float(text.hidden_size) ** 0.5 if gemma else 1.0,
        prefix_lm=prefix_lm,
    )


def decoder_dimensions(text: Any) -> dict[str, Any]:
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
