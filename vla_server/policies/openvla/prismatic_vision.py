"""The vision half of a Prismatic / OpenVLA checkpoint: one or two timm towers and the projector.

The same computation as OpenVLA's `PrismaticVisionBackbone` + `PrismaticProjector`:

    patches = featurizer(pixels[:, :3])                         # second-to-last block, patches
    fused:    patches = cat(patches, fused_featurizer(pixels[:, 3:]), dim=-1)
    embeds  = projector(patches)                                # [patches, text hidden]

Projectors, by `arch_specifier`: "linear" (fc1), "gelu-mlp" (fc1, GELU, fc2) and
"fused-gelu-mlp" (fc1 to 4x the vision width, GELU, fc2, GELU, fc3). The module is sized from
the checkpoint's tensor headers, then every name and shape is checked before a weight is copied,
so a missing or foreign tensor fails start-up (and an update) with the tensor's name.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers.initialization import no_init_weights

from vla_server.model.weight_loader import (
    WeightLoadError,
    check_names_and_shapes,
    load_tensors_with_prefix,
    tensor_shapes,
)
from vla_server.policies.openvla.prismatic_config import PrismaticSpec
from vla_server.policies.openvla.timm_vit import TIMM_FAMILIES, TimmViT, TowerShape

_TOWERS = ("featurizer", "fused_featurizer")
_BACKBONE = "vision_backbone."
_RGB = 3


PRISMATIC_VISION_PREFIXES = ("vision_backbone.", "projector.")


class PrismaticProjector(nn.Module):
    def __init__(self, kind: str, vision_dim: int, llm_dim: int):
        super().__init__()
        widths = {
            "linear": [vision_dim, llm_dim],
            "gelu-mlp": [vision_dim, llm_dim, llm_dim],
            "fused-gelu-mlp": [vision_dim, 4 * vision_dim, llm_dim, llm_dim],
        }[kind]
        for i, (d_in, d_out) in enumerate(zip(widths, widths[1:], strict=False)):
            setattr(self, f"fc{i + 1}", nn.Linear(d_in, d_out))
        self.layers = [getattr(self, f"fc{i + 1}") for i in range(len(widths) - 1)]
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x)
        for layer in self.layers[1:]:
            x = layer(self.act(x))
        return x


class PrismaticVisionEncoder(nn.Module):
    def __init__(
        self,
        spec: PrismaticSpec,
        shapes: dict[str, tuple[int, ...]],
        *,
        dtype: torch.dtype,
        device: str | torch.device,
    ):
        super().__init__()
        self.spec = spec
        self.dtype = dtype
        self.device = torch.device(device)
        with no_init_weights(), self.device:  # every parameter comes from the checkpoint
            towers = [self._tower(i, shapes) for i in range(spec.num_towers)]
            self.featurizer = towers[0]
            self.fused_featurizer = towers[1] if spec.fused else None
            vision_dim = sum(t.patch_embed.proj.out_channels for t in towers)
            self.projector = PrismaticProjector(spec.projector, vision_dim, spec.text_hidden_size)
        patches = {t.num_patches for t in towers}
        if len(patches) != 1:
            raise WeightLoadError(f"the towers give different patch counts {sorted(patches)}")
        self.num_image_tokens = patches.pop()
        self.to(dtype=dtype)
        self.eval()

    def _tower(self, index: int, shapes: dict[str, tuple[int, ...]]) -> TimmViT:
        name = _BACKBONE + _TOWERS[index]
        ours = {n[len(name) + 1 :]: s for n, s in shapes.items() if n.startswith(name + ".")}
        try:
            shape = TowerShape.from_shapes(ours, name)
        except ValueError as e:
            raise WeightLoadError(f"{e} (timm_model_ids[{index}])") from None
        if shape.in_chans != _RGB or shape.depth < 2:
            raise WeightLoadError(
                f"{name}: {shape.in_chans} input channels and {shape.depth} blocks; a tower needs "
                "3 channels and at least 2 blocks (features come from the second-to-last)"
            )
        timm_id = self.spec.timm_model_ids[index]
        size = self.spec.image_sizes[index]
        return TimmViT(TIMM_FAMILIES[timm_id], shape, size, self.spec.act_overrides[index])

    @classmethod
    def from_folder(
        cls, model_path: str | Path, *, dtype: torch.dtype, device: str | torch.device
    ) -> PrismaticVisionEncoder:
        spec = PrismaticSpec.from_config(_read_config(model_path))
        shapes = tensor_shapes(model_path, PRISMATIC_VISION_PREFIXES)
        encoder = cls(spec, shapes, dtype=dtype, device=device)
        encoder.load_weights(encoder.read_weights(model_path))
        return encoder

    @property
    def towers(self) -> list[TimmViT]:
        return [self.featurizer] + ([self.fused_featurizer] if self.fused_featurizer else [])

    @torch.inference_mode()
    def encode(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """One [patches, text hidden] tensor per image of `pixel_values [N, 3 * towers, H, W]`
        (each tower's normalised RGB stacked along the channels, as Prismatic's processor)."""
        size = self.spec.image_sizes[0]
        channels = _RGB * len(self.towers)
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != (channels, size, size):
            raise ValueError(
                f"pixel_values must be [N, {channels}, {size}, {size}], "
                f"got {list(pixel_values.shape)}"
            )
        pixels = pixel_values.to(device=self.device, dtype=self.dtype)
        parts = pixels.split(_RGB, dim=1)
        features = torch.cat([t(p) for t, p in zip(self.towers, parts, strict=True)], dim=-1)
        return list(self.projector(features).unbind(0))

    def read_weights(self, model_path: str | Path) -> dict[str, torch.Tensor]:
        """The checkpoint's vision tensors under this module's names, checked (spec, names,
        shapes) against the module without changing it; `load_weights` copies them in."""
        differences = self.spec.differences(PrismaticSpec.from_config(_read_config(model_path)))
        if differences:
            raise WeightLoadError(
                f"{model_path} has a different vision encoder: " + "; ".join(differences)
            )
        loaded = load_tensors_with_prefix(model_path, PRISMATIC_VISION_PREFIXES)
        found = {n: t for n, t in loaded.items() if not self._unused(n)}
        expected = {_checkpoint_name(n): tuple(t.shape) for n, t in self.state_dict().items()}
        try:
            check_names_and_shapes(
                expected, {n: tuple(t.shape) for n, t in found.items()}, "vision encoder"
            )
        except WeightLoadError as e:
            ids = self.spec.timm_model_ids
            towers = ", ".join(f"{n}={i}" for n, i in zip(_TOWERS, ids, strict=False))
            raise WeightLoadError(f"{e} (built from timm_model_ids: {towers})") from None
        return {n.removeprefix(_BACKBONE): t for n, t in found.items()}

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self.load_state_dict(tensors, strict=True)

    def _unused(self, name: str) -> bool:
        for tower_name, tower in zip(_TOWERS, self.towers, strict=False):
            prefix = f"{_BACKBONE}{tower_name}."
            if name.startswith(prefix):
                return tower.unused(name[len(prefix) :])
        return False


def _checkpoint_name(name: str) -> str:
    return name if name.startswith("projector.") else _BACKBONE + name


def _read_config(model_path: str | Path) -> dict:
    return json.loads((Path(model_path) / "config.json").read_text())
