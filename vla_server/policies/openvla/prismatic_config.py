"""The vision half of a Prismatic / OpenVLA checkpoint, read from its `config.json`.

OpenVLA publishes `model_type: "openvla"` (`OpenVLAConfig`, a `PrismaticConfig`) with remote
code; nothing here runs that code. The keys mean what `configuration_prismatic.py` makes of
them: `vision_backbone_id` names the towers, and the saved `timm_model_ids`,
`timm_override_act_layers` and `image_sizes` (written next to it) win over the id's table, as
`PretrainedConfig` sets saved keys after `__init__`. `arch_specifier` names the projector by
its suffix ("linear", "gelu-mlp", "fused-gelu-mlp"); `use_fused_vision_backbone` defaults to
whether the backbone id starts with "dinoclip" or "dinosiglip".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from vla_server.policies.openvla.timm_vit import TIMM_FAMILIES

PRISMATIC_MODEL_TYPES = ("openvla", "prismatic")
_DINO = "vit_large_patch14_reg4_dinov2.lvd142m"
_SIGLIP_224, _SIGLIP_384 = "vit_so400m_patch14_siglip_224", "vit_so400m_patch14_siglip_384"
_CLIP_224, _CLIP_336 = "vit_large_patch14_clip_224.openai", "vit_large_patch14_clip_336.openai"
# vision_backbone_id -> (timm ids, activation overrides, image sizes)
BACKBONES: dict[str, tuple[tuple[str, ...], tuple[str | None, ...], tuple[int, ...]]] = {
    "clip-vit-l": ((_CLIP_224,), ("quick_gelu",), (224,)),
    "clip-vit-l-336px": ((_CLIP_336,), ("quick_gelu",), (336,)),
    "siglip-vit-so400m": ((_SIGLIP_224,), (None,), (224,)),
    "siglip-vit-so400m-384px": ((_SIGLIP_384,), (None,), (384,)),
    "dinov2-vit-l": ((_DINO,), (None,), (224,)),
    "in1k-vit-l": (("vit_large_patch16_224.augreg_in21k_ft_in1k",), (None,), (224,)),
    "dinoclip-vit-l-336px": ((_DINO, _CLIP_336), (None, "quick_gelu"), (336, 336)),
    "dinosiglip-vit-so-224px": ((_DINO, _SIGLIP_224), (None, None), (224, 224)),
    "dinosiglip-vit-so-384px": ((_DINO, _SIGLIP_384), (None, None), (384, 384)),
}
PROJECTORS = ("fused-gelu-mlp", "gelu-mlp", "linear")  # longest suffix first
_ACT_OVERRIDES = (None, "gelu", "quick_gelu")


@dataclass(frozen=True)
class PrismaticSpec:
    """Everything about a Prismatic checkpoint's vision half that changes its output."""

    vision_backbone_id: str
    timm_model_ids: tuple[str, ...]  # one per tower: featurizer, then fused_featurizer
    act_overrides: tuple[str | None, ...]
    image_sizes: tuple[int, ...]
    fused: bool
    projector: str  # one of PROJECTORS
    text_hidden_size: int

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> PrismaticSpec:
        backbone = raw.get("vision_backbone_id")
        if backbone not in BACKBONES and "timm_model_ids" not in raw:
            raise ValueError(
                f"vision_backbone_id {backbone!r} is not a Prismatic backbone "
                f"(known: {', '.join(BACKBONES)})"
            )
        ids, acts, sizes = BACKBONES.get(backbone, ((), (), ()))
        default_fused = str(backbone).startswith(("dinoclip", "dinosiglip"))
        fused = raw.get("use_fused_vision_backbone")
        spec = cls(
            vision_backbone_id=str(backbone),
            timm_model_ids=tuple(raw.get("timm_model_ids") or ids),
            act_overrides=tuple(raw.get("timm_override_act_layers") or acts),
            image_sizes=tuple(int(s) for s in raw.get("image_sizes") or sizes),
            fused=default_fused if fused is None else bool(fused),
            projector=_projector(str(raw.get("arch_specifier", "no-align+gelu-mlp"))),
            text_hidden_size=int((raw.get("text_config") or {}).get("hidden_size", 4096)),
        )
        spec.check()
        return spec

    @property
    def num_towers(self) -> int:
        return 2 if self.fused else 1

    def check(self) -> None:
        n = self.num_towers
        for name in ("timm_model_ids", "act_overrides", "image_sizes"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"{_KEY.get(name, name)} has {len(getattr(self, name))} entries; "
                    f"use_fused_vision_backbone={self.fused} needs {n}"
                )
        for i, timm_id in enumerate(self.timm_model_ids):
            if timm_id not in TIMM_FAMILIES:
                raise ValueError(
                    f"timm_model_ids[{i}] {timm_id!r} is not a supported tower "
                    f"(supported: {', '.join(TIMM_FAMILIES)})"
                )
        for i, act in enumerate(self.act_overrides):
            if act not in _ACT_OVERRIDES:
                raise ValueError(f"timm_override_act_layers[{i}] {act!r} is not supported")
        if len(set(self.image_sizes)) != 1:
            raise ValueError(f"image_sizes {list(self.image_sizes)} differ between the towers")

    def differences(self, other: PrismaticSpec) -> list[str]:
        return [
            f"vision {f.name}: {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]


_KEY = {"act_overrides": "timm_override_act_layers"}


def _projector(arch_specifier: str) -> str:
    for name in PROJECTORS:
        if arch_specifier.endswith(name):
            return name
    raise ValueError(
        f"arch_specifier {arch_specifier!r} names no supported projector ({', '.join(PROJECTORS)})"
    )
