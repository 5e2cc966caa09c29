"""`SmolVLAPolicy`: the model and its processors together, for one-call chunks (tests, bench,
a non-batching caller); a server drives `SmolVLA`'s three steps itself."""

from __future__ import annotations

from pathlib import Path

import torch

from vla_server.policies.smolvla.model import SmolVLA
from vla_server.policies.smolvla.processor import Observation, SmolVLAProcessor, load_tokenizer
from vla_server.policies.smolvla.processor_files import read_processor_files


class SmolVLAPolicy:
    def __init__(self, model: SmolVLA, processor: SmolVLAProcessor):
        self.model = model
        self.processor = processor

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> SmolVLAPolicy:
        model = SmolVLA.from_folder(folder, dtype=dtype, device=device)
        config = model.config
        processor = SmolVLAProcessor(config, load_tokenizer(config), read_processor_files(folder))
        return cls(model, processor)

    def predict_action_chunk(
        self,
        obs: Observation,
        *,
        noise: torch.Tensor | None = None,
        seeds: list[int | None] | None = None,
    ) -> torch.Tensor:
        """The robot's chunk [B, H, action_dim] (unnormalized, on the CPU), from `noise`
        [B, H, max_action_dim] or else each row's seed (fresh noise without either)."""
        inputs = self.processor(obs, self.model.device)
        if noise is None:
            noise = self.model.initial_noise(seeds or [None] * len(obs.task))
        chunk = self.model.sample_actions(inputs, noise)
        return self.processor.actions(chunk.cpu())
