"""What a LLaVA-format checkpoint's vision half computes, read from its `config.json`.

`VisionSpec` holds every setting that changes the image embeddings besides the weights: the
tower's architecture, which hidden states are selected (`vision_feature_layer`, an int or a list
whose states are concatenated along the channels), whether the first token is dropped
(`vision_feature_select_strategy` "default") or kept ("full"), and the projector's activation
and bias. `transformers`' `LlavaConfig` parses the file, so missing keys get its defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from vla_server.model.hf_tower import TOWER_KEYS

_TOWER_TYPES = ("clip_vision_model", "siglip_vision_model")
_STRATEGIES = ("default", "full")


@dataclass(frozen=True)
class VisionSpec:
    """Everything about a checkpoint's vision half that changes its output, besides weights."""

    tower_type: str  # "clip_vision_model" or "siglip_vision_model"
    tower: dict[str, Any]  # the `TOWER_KEYS` of vision_config
    feature_layers: tuple[int, ...]  # hidden-state indices, made non-negative (0 = embeddings)
    drop_first_token: bool  # vision_feature_select_strategy == "default"
    projector_act: str
    projector_bias: bool
    text_hidden_size: int

    @classmethod
    def from_folder(cls, model_path: str | Path) -> VisionSpec:
        return cls.from_hf_config(
            AutoConfig.from_pretrained(str(model_path), trust_remote_code=False)
        )

    @classmethod
    def from_hf_config(cls, config: Any) -> VisionSpec:
        if config.model_type != "llava":
            raise NotImplementedError(
                f"vision: model_type {config.model_type!r} is not supported (only llava)"
            )
        vision = config.vision_config
        if vision.model_type not in _TOWER_TYPES:
            raise NotImplementedError(
                f"vision tower {vision.model_type!r} is not supported ({', '.join(_TOWER_TYPES)})"
            )
        strategy = config.vision_feature_select_strategy
        if strategy not in _STRATEGIES:
            raise ValueError(
                f"vision_feature_select_strategy {strategy!r} is not one of {_STRATEGIES}"
            )
        return cls(
            tower_type=vision.model_type,
            tower={key: getattr(vision, key) for key in TOWER_KEYS},
            feature_layers=_feature_layers(config.vision_feature_layer, vision.num_hidden_layers),
            drop_first_token=strategy == "default",
            projector_act=config.projector_hidden_act,
            projector_bias=bool(config.multimodal_projector_bias),
            text_hidden_size=config.text_config.hidden_size,
        )

    @property
    def image_size(self) -> int:
        return self.tower["image_size"]

    @property
    def num_image_tokens(self) -> int:
        """Embeddings (and so prompt positions) per image."""
        patches = (self.image_size // self.tower["patch_size"]) ** 2
        has_cls = self.tower_type == "clip_vision_model"
        return patches + has_cls - self.drop_first_token

    @property
    def layers_kept(self) -> int:
        # At least one: `transformers` records the hidden states from the encoder layers' inputs
        # and outputs, so a tower without layers reports none, not even the embeddings.
        return max(1, *self.feature_layers)

    def differences(self, other: VisionSpec) -> list[str]:
        return [
            f"vision {f.name}: {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]


def _feature_layers(layer: int | list[int], num_layers: int) -> tuple[int, ...]:
    """`vision_feature_layer` as indices into the num_layers + 1 hidden states."""
    layers = [layer] if isinstance(layer, int) else list(layer)
    if not layers:
        raise ValueError("vision_feature_layer is an empty list")
    out = []
    for index in layers:
        if not -(num_layers + 1) <= index <= num_layers:
            raise ValueError(
                f"vision_feature_layer {index} is out of range for a {num_layers}-layer tower"
            )
        out.append(index % (num_layers + 1))
    return tuple(out)
