"""The vision half of a PaliGemma backbone (pi-family policies): SigLIP and a linear projector.

The same computation as transformers' `PaliGemmaModel.get_image_features` (and LeRobot's
`embed_image`): `projector.linear(siglip(pixels).last_hidden_state)`, every patch kept, the
SigLIP post-layernorm applied, no pooling head (`model/siglip_tower.py`: q/k/v fused), no
scaling of the result (the text embeddings
are scaled by sqrt(width) in the decoder; image embeddings are not). The tower runs in float32
whatever the model dtype, as LeRobot keeps it; the projector runs in the model dtype.

Checkpoint names, after the policy's prefix (`POLICY_PREFIXES`):
`model.vision_tower[.vision_model].X` and `model.multi_modal_projector.linear.{weight,bias}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_server.model.hf_tower import TOWER_KEYS, VISION_PREFIXES, module_name
from vla_server.model.siglip_tower import SiglipTower, fuse_qkv
from vla_server.model.weight_loader import check_module_tensors, load_tensors_with_prefix

# LeRobot saves its pi-family policies' PaliGemma under these (fine-tuned folders with `model.`).
POLICY_PREFIXES = ("model.paligemma_with_expert.paligemma.", "paligemma_with_expert.paligemma.")


def tower_settings(paligemma: Any) -> dict[str, Any]:
    """The SigLIP settings of a transformers `PaliGemmaConfig` that decide the tower's output."""
    vision = paligemma.vision_config.to_dict()
    return {k: vision[k] for k in TOWER_KEYS}


class PaliGemmaVisionEncoder(nn.Module):
    def __init__(
        self,
        tower: dict[str, Any],
        text_hidden_size: int,
        *,
        dtype: torch.dtype,
        device: str | torch.device,
    ):
        super().__init__()
        self.spec = (tower, text_hidden_size)
        self.dtype = dtype
        self.device = torch.device(device)
        with self.device:  # every parameter then comes from the checkpoint
            self.tower = SiglipTower(tower)
            self.projector = nn.Module()
            self.projector.linear = nn.Linear(tower["hidden_size"], text_hidden_size)
        self.tower.to(dtype=torch.float32)
        self.projector.to(dtype=dtype)
        self.eval()

    @classmethod
    def from_folder(
        cls,
        model_path: str | Path,
        paligemma: Any,
        *,
        dtype: torch.dtype,
        device: str | torch.device,
    ) -> PaliGemmaVisionEncoder:
        """`paligemma`: the backbone's transformers `PaliGemmaConfig`."""
        text_hidden = paligemma.text_config.hidden_size
        encoder = cls(tower_settings(paligemma), text_hidden, dtype=dtype, device=device)
        encoder.load_weights(encoder.read_weights(model_path))
        return encoder

    @property
    def num_image_tokens(self) -> int:
        tower = self.spec[0]
        return (tower["image_size"] // tower["patch_size"]) ** 2

    @torch.inference_mode()
    def encode(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """One [patches, text width] tensor (model dtype) per image of `pixel_values
        [N, 3, S, S]` (S the tower's image size, values in [-1, 1])."""
        tower = self.spec[0]
        expected = (tower["num_channels"], tower["image_size"], tower["image_size"])
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != expected:
            raise ValueError(
                f"pixel_values must be [N, {', '.join(map(str, expected))}], "
                f"got {list(pixel_values.shape)}"
            )
        pixels = pixel_values.to(device=self.device, dtype=torch.float32)
        features = self.tower(pixels)
        return list(self.projector.linear(features.to(self.dtype)).unbind(0))

    def read_weights(self, model_path: str | Path) -> dict[str, torch.Tensor]:
        """The checkpoint's vision tensors under this module's names, checked against the module
        (names, shapes) without changing it; `load_weights` then copies them in. A folder whose
        tower settings differ is refused before this, by the family (`differences`)."""
        loaded = load_tensors_with_prefix(model_path, VISION_PREFIXES, strip=POLICY_PREFIXES)
        tensors = fuse_qkv({module_name(n): t for n, t in loaded.items()})
        check_module_tensors(self, tensors, "vision encoder")
        return tensors

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self.load_state_dict(tensors, strict=True)
