"""The PaliGemma backbone of a pi-family policy as a transformers `PaliGemmaConfig`.

A LeRobot folder names its backbone (`paligemma_variant`); the variants are openpi's
(`gemma.py get_config`), assembled as LeRobot's `PI0FastPaliGemma` does: Gemma text model with
GeGLU (tanh GELU), one KV head (MQA), head_dim 256, vocabulary 257152 (the image token id is
257152 too: one past the text vocabulary); SigLIP So400m/14 at 224 px (hidden 1152, 27 layers,
16 heads, MLP 4304) without the pooling head; a linear projector to the text width. A
`vlm_config` dict in `config.json` (transformers' own PaliGemma config) wins over the variant:
that is how tiny test checkpoints describe themselves.

The action expert of pi0 / pi0.5 (`expert_config`) is one of the same Gemma variants
(`action_expert_variant`, "gemma_300m" in the released policies, openpi's "dummy" in its tests),
or the `dit_config` Gemma dict of transformers' `PI0Config`.
"""

from __future__ import annotations

from typing import Any

from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec

PALIGEMMA_VOCAB = 257152
# openpi's Gemma variants: width, depth, MLP width, heads, KV heads, head dim.
GEMMA_VARIANTS: dict[str, tuple[int, int, int, int, int, int]] = {
    "gemma_2b": (2048, 18, 16384, 8, 1, 256),
    "gemma_300m": (1024, 18, 4096, 8, 1, 256),
    "dummy": (64, 4, 128, 8, 1, 16),
}
SIGLIP_SO400M: dict[str, Any] = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "patch_size": 14,
    "image_size": 224,
    "vision_use_head": False,
}


def gemma_text_config(variant: str, vocab_size: int = PALIGEMMA_VOCAB) -> dict[str, Any]:
    """A transformers GemmaConfig dict for one of openpi's Gemma variants."""
    if variant not in GEMMA_VARIANTS:
        raise ValueError(
            f"Gemma variant {variant!r} is not known (known: {', '.join(GEMMA_VARIANTS)})"
        )
    width, depth, mlp, heads, kv_heads, head_dim = GEMMA_VARIANTS[variant]
    return {
        "model_type": "gemma",
        "hidden_size": width,
        "num_hidden_layers": depth,
        "intermediate_size": mlp,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "gelu_pytorch_tanh",
        "vocab_size": vocab_size,
    }


def paligemma_config(spec: LeRobotPolicySpec) -> Any:
    """The transformers `PaliGemmaConfig` of the policy's backbone."""
    from transformers import PaliGemmaConfig

    if spec.vlm_config is not None:
        return PaliGemmaConfig.from_dict(spec.vlm_config)
    text = gemma_text_config(spec.paligemma_variant)
    height, width = spec.image_resolution
    if height != width:
        raise ValueError(f"image_resolution {spec.image_resolution} is not square")
    vision = {**SIGLIP_SO400M, "image_size": height, "model_type": "siglip_vision_model"}
    return PaliGemmaConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=PALIGEMMA_VOCAB,
        projection_dim=text["hidden_size"],
        hidden_size=text["hidden_size"],
    )


def expert_config(spec: LeRobotPolicySpec) -> Any:
    """The transformers `GemmaConfig` of a flow policy's action expert (its embedding is unused:
    the expert reads the suffix embeddings of the flow heads)."""
    from transformers import GemmaConfig

    if spec.dit_config is not None:
        return GemmaConfig.from_dict({**spec.dit_config, "model_type": "gemma"})
    return GemmaConfig.from_dict(gemma_text_config(spec.action_expert_variant))
