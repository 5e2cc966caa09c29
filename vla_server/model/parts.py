"""What the model runner needs from a checkpoint's policy family, as interfaces.

The runner is generic: a decoder over the paged KV pool, an optional vision encoder, an optional
action head that denoises a chunk over a request's prefix K/V. Which of those a folder has, and
how its tensors are named, is the family's knowledge (`vla_server/policies/`); the runner asks
for them through `ModelParts`, so nothing here names a family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from vla_server.model.config import ModelConfig
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.model.weight_loader import DecoderLayout


class VisionEncoder(Protocol):
    """Preprocessed pixels [N, C, H, W] -> one [num_image_tokens, hidden] embedding per image."""

    @property
    def num_image_tokens(self) -> int: ...

    def encode(self, pixel_values: torch.Tensor) -> list[torch.Tensor]: ...

    def read_weights(self, model_path: str | Path) -> dict[str, torch.Tensor]:
        """Every tensor this encoder needs from `model_path`, checked; changes nothing."""
        ...

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None: ...


class ActionHead(Protocol):
    """A chunk denoiser over a request's prefix K/V in the pool (flow matching's velocity)."""

    chunk_size: int
    width: int  # the padded action width the head denoises

    def owns(self, name: str) -> bool:
        """Whether checkpoint tensor `name` is this head's (the decoder loader leaves it)."""
        ...

    def plan_weights(self, model_path: str | Path) -> Any:
        """This head's tensors in `model_path`, checked from the headers; changes nothing."""
        ...

    def load_weights(self, plan: Any, *, progress: bool = True) -> None: ...

    def velocity(
        self,
        prefix: PagedPrefix,
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        """float32 velocity [B, chunk_size, width] at the noisy chunks `x_t` (same shape) and
        times [B]; `state` [B, ...]: the requests' normalised robot state, for heads that read
        it beside the prefix (None: the head's zeros)."""
        ...


@runtime_checkable
class StateTokenHead(Protocol):
    """An action head whose robot state is a token of the prompt, not an input beside it: the
    front end puts a placeholder at the request's `state_position`, and the prefill replaces
    that position's embedding with `embed_state` of the request's normalised `state` (the way
    image positions get their features), so the decoder's layers see it like any token."""

    def embed_state(self, state: torch.Tensor) -> torch.Tensor:
        """The prompt embeddings [B, hidden] (float32) of normalised states [B, state width]."""
        ...


class ModelParts(Protocol):
    """The family's side of building a model from its folder."""

    folder: Path

    def decoder_config(self) -> ModelConfig: ...

    def decoder_layout(self) -> DecoderLayout: ...

    def vision_encoder(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device
    ) -> VisionEncoder | None: ...

    def action_head(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device, context_len: int
    ) -> ActionHead | None: ...

    def differences(self, other: ModelParts) -> list[str]:
        """How `other` (a folder of the same family) differs beyond the decoder config, in
        ways a weight update cannot take (an action head of another shape)."""
        ...
