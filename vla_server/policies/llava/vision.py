"""The vision half of a LLaVA-format checkpoint: vision tower, feature selection, MLP projector.

`VisionEncoder.encode` turns preprocessed images into the embeddings that replace the image
tokens in the decoder's input, the same computation as `transformers`'
`LlavaModel.get_image_features`:

    hidden_states = tower(pixels).hidden_states        # [0] = embeddings, [k] = after layer k
    features = concat(hidden_states[l] for l in vision_feature_layer)   # along the channels
    features = features[:, 1:] if vision_feature_select_strategy == "default" else features
    embeds = linear_2(act(linear_1(features)))         # [num_image_tokens, text hidden]

The tower is `transformers`' own CLIPVisionModel or SiglipVisionModel, built from the
checkpoint's `vision_config` but cut after the deepest selected layer (LLaVA-1.5 reads layer -2,
so the last layer would be wasted work) and without SigLIP's pooling head. "default" drops the
first token whatever it is: CLIP's CLS token, or, as `transformers` does, a SigLIP patch.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel
from transformers.activations import ACT2FN
from transformers.initialization import no_init_weights

from vla_server.model.hf_tower import VISION_PREFIXES, module_name
from vla_server.model.weight_loader import (
    WeightLoadError,
    check_module_tensors,
    load_tensors_with_prefix,
)
from vla_server.policies.llava.vision_spec import VisionSpec

_LAYER_RE = re.compile(r"tower\.encoder\.layers\.(\d+)\.")


class LlavaProjector(nn.Module):
    """linear_1 -> activation -> linear_2, named as in the checkpoint."""

    def __init__(self, in_dim: int, out_dim: int, act: str, bias: bool):
        super().__init__()
        self.linear_1 = nn.Linear(in_dim, out_dim, bias=bias)
        self.act = ACT2FN[act]
        self.linear_2 = nn.Linear(out_dim, out_dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


class LlavaVisionEncoder(nn.Module):
    def __init__(self, spec: VisionSpec, *, dtype: torch.dtype, device: str | torch.device):
        super().__init__()
        self.spec = spec
        self.dtype = dtype
        self.device = torch.device(device)
        extra = {"vision_use_head": False} if spec.tower_type == "siglip_vision_model" else {}
        tower_config = AutoConfig.for_model(
            spec.tower_type, **{**spec.tower, "num_hidden_layers": spec.layers_kept, **extra}
        )
        in_dim = spec.tower["hidden_size"] * len(spec.feature_layers)
        # Parameters are left uninitialised: every one is overwritten by the checkpoint.
        with no_init_weights(), self.device:
            self.tower = AutoModel.from_config(tower_config)
            self.projector = LlavaProjector(
                in_dim, spec.text_hidden_size, spec.projector_act, spec.projector_bias
            )
        self.to(dtype=dtype)
        self.eval()

    @classmethod
    def from_folder(
        cls, model_path: str | Path, *, dtype: torch.dtype, device: str | torch.device
    ) -> LlavaVisionEncoder:
        encoder = cls(VisionSpec.from_folder(model_path), dtype=dtype, device=device)
        encoder.load_weights(encoder.read_weights(model_path))
        return encoder

    @property
    def num_image_tokens(self) -> int:
        return self.spec.num_image_tokens

    @torch.inference_mode()
    def encode(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """One [num_image_tokens, text hidden] tensor per image of `pixel_values [N, 3, H, W]`
        (H = W = the tower's image_size), in this encoder's dtype, on its device."""
        size, channels = self.spec.image_size, self.spec.tower["num_channels"]
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != (channels, size, size):
            raise ValueError(
                f"pixel_values must be [N, {channels}, {size}, {size}], "
                f"got {list(pixel_values.shape)}"
            )
        pixels = pixel_values.to(device=self.device, dtype=self.dtype)
        hidden_states = self.tower(pixel_values=pixels, output_hidden_states=True).hidden_states
        features = torch.cat([hidden_states[i] for i in self.spec.feature_layers], dim=-1)
        if self.spec.drop_first_token:
            features = features[:, 1:]
        return list(self.projector(features).unbind(0))

    def read_weights(self, model_path: str | Path) -> dict[str, torch.Tensor]:
        """The checkpoint's vision tensors under this module's names, checked against the module
        (spec, names, shapes) without changing it; `load_weights` then copies them in."""
        differences = self.spec.differences(VisionSpec.from_folder(model_path))
        if differences:
            raise WeightLoadError(
                f"{model_path} has a different vision encoder: " + "; ".join(differences)
            )
        tensors = {}
        for name, tensor in load_tensors_with_prefix(model_path, VISION_PREFIXES).items():
            ours = module_name(name)
            if not self._unused(ours):
                tensors[ours] = tensor
        check_module_tensors(self, tensors, "vision encoder")
        return tensors

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self.load_state_dict(tensors, strict=True)

    def _unused(self, name: str) -> bool:
        """Checkpoint tensors of the layers past the deepest selected one, or of the SigLIP head."""
        if name.startswith("tower.head."):
            return True
        match = _LAYER_RE.match(name)
        return match is not None and int(match.group(1)) >= self.spec.layers_kept
