"""pi0 and pi0.5 (LeRobot's `pi0` / `pi05`, and openpi's PyTorch conversions of them): a
PaliGemma prefix and a Gemma action expert that denoises a chunk over its K/V by flow matching
(`flow_model.py`); pi0 reads the state through a state token, pi0.5 in its prompt."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from vla_server.io_struct import ModelInfo
from vla_server.model.config import ModelConfig
from vla_server.model.parts import ActionHead, ModelParts
from vla_server.policies.base import ActionDecoder, Denoise, HeadSpec
from vla_server.policies.pi0.flow_keys import FLOW_TYPES
from vla_server.policies.pi0.flow_model import FlowModel, expert_model_config
from vla_server.policies.pi0.frontend import Pi0Frontend
from vla_server.policies.pi0.openpi_config import openpi_policy_config
from vla_server.policies.pi_common.chunk_decoder import ChunkDecoder
from vla_server.policies.pi_common.family import PiFamily
from vla_server.policies.pi_common.flow_actions import FlowActionPolicy


class Pi0Family(PiFamily):
    name = "pi0"
    config_types = FLOW_TYPES

    @classmethod
    def tiny_checkpoints(cls) -> dict[str, Callable[[], Path]]:
        from vla_server.policies.pi0.tiny import KINDS, pi0_model_path, rtc_model_path

        tiny = {kind: partial(pi0_model_path, kind, "bare") for kind in KINDS}
        so100 = {f"{kind}-so100": partial(pi0_model_path, kind, "bare", robot="so100")
                 for kind in KINDS}  # fmt: skip
        return tiny | so100 | {f"{kind}-rtc": partial(rtc_model_path, kind) for kind in KINDS}

    @classmethod
    def describe_config(cls, folder: Path, raw: dict[str, Any]) -> dict[str, Any]:
        return openpi_policy_config(folder, raw) or raw

    def action_head(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device, context_len: int
    ) -> ActionHead | None:
        spec = self.spec
        flow = FlowModel(
            expert_model_config(config, spec),
            spec,
            dtype=dtype,
            device=str(device),
            # Suffix positions run past the prefix by up to the state token and the chunk.
            max_positions=context_len + spec.chunk_size + 1,
        )
        return flow.eval()

    def differences(self, other: ModelParts) -> list[str]:
        found = super().differences(other)
        if isinstance(other, Pi0Family):
            found += self.spec.flow_differences(other.spec)
        return found

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        spec = self.spec
        return Denoise(spec.chunk_size, spec.max_action_dim, spec.num_inference_steps)

    def policy(self) -> FlowActionPolicy:
        return FlowActionPolicy.from_folder(self.folder, self.spec, self.layout == "openpi")

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> Pi0Frontend:
        return Pi0Frontend(tokenizer, info, self.policy(), self.convention(convention))

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        return ChunkDecoder(self.policy())
