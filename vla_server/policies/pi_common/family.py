"""What the pi families (pi0-FAST, pi0, pi0.5) share: a LeRobot policy folder (or an openpi
conversion described as one) on a PaliGemma backbone. Images come first and are resized with
padding; the whole prompt is a bidirectional prefix; the decoder's tensors sit under the
policy's PaliGemma prefixes; the tokenizer is found where LeRobot names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vla_server.model.config import ModelConfig, model_config
from vla_server.model.hf_tower import VISION_PREFIXES
from vla_server.model.parts import ModelParts, VisionEncoder
from vla_server.model.tokenizer import load_tokenizer
from vla_server.model.weight_loader import DecoderLayout
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.policies.base import PolicyFamily
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.pad_resize import PadResize
from vla_server.policies.pi_common.paligemma_config import paligemma_config
from vla_server.policies.pi_common.paligemma_vision import (
    POLICY_PREFIXES,
    PaliGemmaVisionEncoder,
    tower_settings,
)
from vla_server.policies.pi_common.tokenizer_folder import tokenizer_folder

LAYOUTS = ("lerobot", "openpi")


class PiFamily(PolicyFamily):
    def __init__(self, folder: Path, config: dict[str, Any]):
        super().__init__(folder, config)
        self.spec = LeRobotPolicySpec.from_config(config)
        # Whose conventions the folder follows: openpi's conversion or LeRobot's own save.
        self.layout: str = config.get("layout", "lerobot")

    def paligemma(self) -> Any:
        return paligemma_config(self.spec)

    def decoder_config(self) -> ModelConfig:
        hf = self.paligemma()
        return model_config(
            self.folder,
            self.config,
            hf,
            hf.text_config,
            architecture=self.spec.policy_type,
            prefix_lm=True,
            image_token_id=hf.image_token_id,
            eos_from_text=True,
        )

    def decoder_layout(self) -> DecoderLayout:
        # PaliGemma's vision half is named as transformers names it, under the policy's prefixes.
        return DecoderLayout(strip=POLICY_PREFIXES, skip=VISION_PREFIXES)

    def vision_encoder(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device
    ) -> VisionEncoder | None:
        return PaliGemmaVisionEncoder.from_folder(
            self.folder, self.paligemma(), dtype=dtype, device=device
        )

    def differences(self, other: ModelParts) -> list[str]:
        if not isinstance(other, PiFamily):
            return [f"family: {type(other).__name__}"]
        ours, theirs = tower_settings(self.paligemma()), tower_settings(other.paligemma())
        return [
            f"vision {k}: {ours[k]!r} != {theirs.get(k)!r}"
            for k in ours
            if ours[k] != theirs.get(k)
        ]

    def tokenizer(self) -> Any:
        folder = tokenizer_folder(self.folder, self.spec.text_tokenizer_name)
        return load_tokenizer(folder, self.paligemma())

    def image_preprocessor(self, backend: str) -> ImagePreprocessor | None:
        return PadResize(*self.spec.image_resolution)

    def convention(self, asked: str) -> str:
        """The prompt convention a request follows: `asked`, or the folder's own for "auto"."""
        convention = self.layout if asked == "auto" else asked
        if convention not in LAYOUTS:
            raise ValueError(f"prompt convention {convention!r} is not one of {LAYOUTS}")
        return convention
