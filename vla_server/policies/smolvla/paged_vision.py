"""SmolVLA's image encoder for the engine (a `model.parts.VisionEncoder`): the model half's
SmolVLM2 vision transformer and connector (`vision.py`), each image's tokens scaled by
sqrt(VLM width) as a tensor of the model's dtype (LeRobot's `embed_image`, as
`PrefixEncoder.embed_image` does), one [tokens_per_image, width] tensor per image.

Tensors (bare or under `model.`): `vlm_with_expert.vlm.model.vision_model.*` and
`vlm_with_expert.vlm.model.connector.modality_projection.proj.weight`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vla_server.model.weight_loader import check_names_and_shapes, load_tensors_with_prefix
from vla_server.policies.smolvla.config import SmolVLAConfig
from vla_server.policies.smolvla.vision import Connector, VisionEncoder
from vla_server.policies.smolvla.weights import LEROBOT_PREFIX, VLM

RENAMES = (
    (VLM + "vision_model.", "vision."),
    (VLM + "connector.modality_projection.", "connector."),
)


class PagedVisionEncoder(nn.Module):
    def __init__(self, c: SmolVLAConfig, *, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        with torch.device("meta"):  # every parameter comes from the checkpoint
            self.vision = VisionEncoder(c.vision)
            self.connector = Connector(c.vision.hidden_size, c.text.hidden_size, c.scale_factor)
        self.to_empty(device=device)
        self.to(dtype)
        self.requires_grad_(False).eval()
        self.image_shape = (c.vision.num_channels, c.vision.image_size, c.vision.image_size)
        self.tokens = c.tokens_per_image
        self.device, self.dtype = torch.device(device), dtype

    @property
    def num_image_tokens(self) -> int:
        return self.tokens

    @torch.inference_mode()
    def encode(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """One [tokens_per_image, VLM width] tensor (model dtype) per image of `pixel_values`
        [N, 3, S, S] in [-1, 1] (S the vision tower's image size)."""
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != self.image_shape:
            shape = ", ".join(map(str, self.image_shape))
            raise ValueError(f"pixel_values must be [N, {shape}], got {list(pixel_values.shape)}")
        pixels = pixel_values.to(device=self.device, dtype=self.dtype)
        tokens = self.connector(self.vision(pixels))
        scale = torch.tensor(tokens.shape[-1] ** 0.5, dtype=tokens.dtype, device=tokens.device)
        return list((tokens * scale).unbind(0))

    def read_weights(self, model_path: str | Path) -> dict[str, torch.Tensor]:
        """The folder's vision and connector tensors under this module's names, checked (a
        problem names the checkpoint's tensor, without `model.`)."""
        prefixes = tuple(theirs for theirs, _ in RENAMES)
        loaded = load_tensors_with_prefix(model_path, prefixes, strip=(LEROBOT_PREFIX,))
        expected = {_checkpoint_name(n): tuple(t.shape) for n, t in self.state_dict().items()}
        found = {name: tuple(t.shape) for name, t in loaded.items()}
        check_names_and_shapes(expected, found, "vision encoder")
        return {_module_name(name): tensor for name, tensor in loaded.items()}

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self.load_state_dict(tensors, strict=True, assign=False)


def _module_name(checkpoint: str) -> str:
    theirs, ours = next((t, o) for t, o in RENAMES if checkpoint.startswith(t))
    return ours + checkpoint[len(theirs) :]


def _checkpoint_name(module: str) -> str:
    theirs, ours = next((t, o) for t, o in RENAMES if module.startswith(o))
    return theirs + module[len(ours) :]
