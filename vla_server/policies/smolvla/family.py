"""SmolVLA (LeRobot `smolvla`) served by the engine: SmolVLM2's text decoder, cut to
`num_vlm_layers`, is the engine's decoder over the paged KV pool (Llama layers, RoPE base 10000
as LeRobot hard-codes it, token embeddings scaled by sqrt(width)); its vision tower and
connector are the image encoder (`paged_vision.py`); the action expert denoises the chunk over
the pool's prefix K/V (`paged_head.py`), and embeds the state token (`frontend.py` for the
prompt). The model half (`model.py`, `SmolVLAPolicy`) is the same computation in one process.

The backbone's config and tokenizer come from `vlm_model_name` (`config.find_vlm_folder`: a
local folder, `vlm/` inside the checkpoint, or the local Hugging Face cache; never downloaded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from vla_server.io_struct import ModelInfo
from vla_server.model.config import ModelConfig, model_config
from vla_server.model.parts import ActionHead, ModelParts, VisionEncoder
from vla_server.model.tokenizer import load_tokenizer
from vla_server.model.weight_loader import DecoderLayout
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.policies.base import ActionDecoder, Denoise, HeadSpec, PolicyFamily
from vla_server.policies.pi_common.chunk_decoder import ChunkDecoder
from vla_server.policies.pi_common.flow_actions import FlowActionPolicy
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.pad_resize import LeftTopPadResize
from vla_server.policies.smolvla.config import ROPE_BASE, SmolVLAConfig, read_config
from vla_server.policies.smolvla.frontend import SmolVLAFrontend
from vla_server.policies.smolvla.paged_head import PagedActionHead
from vla_server.policies.smolvla.paged_vision import PagedVisionEncoder
from vla_server.policies.smolvla.processor_files import read_processor_files

# The decoder's tensors, after these prefixes, are Idefics3's `model.text_model.*`/`lm_head.*`.
POLICY_PREFIXES = ("model.vlm_with_expert.vlm.", "vlm_with_expert.vlm.")
VISION_PARTS = ("model.vision_model.", "model.connector.")
MEAN_STD = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
# SmolVLAConfig fields that only locate files: two folders that differ in these alone compute
# the same function.
_LOCATION = ("folder", "vlm_folder")


class SmolVLAFamily(PolicyFamily):
    name = "smolvla"
    config_types = ("smolvla",)

    def __init__(self, folder: Path, config: dict[str, Any]):
        super().__init__(folder, config)
        self.smol: SmolVLAConfig = read_config(folder)
        _check_servable(self.smol)

    @classmethod
    def tiny_checkpoints(cls) -> dict[str, Callable[[], Path]]:
        from vla_server.policies.smolvla.tiny import smolvla_model_path

        return {"smolvla": smolvla_model_path}

    @cached_property
    def spec(self) -> LeRobotPolicySpec:
        """The policy's robot side (cameras, state, chunk, statistics) as the pi families read
        theirs."""
        c = self.smol
        width, height = c.resize_with_padding or (c.vision.image_size, c.vision.image_size)
        return LeRobotPolicySpec.from_config(
            {
                **self.config,
                "image_resolution": [height, width],
                "num_inference_steps": c.num_steps,
                "tokenizer_max_length": c.tokenizer_max_length,
                "text_tokenizer_name": str(c.vlm_folder),
                "normalization_mapping": self.config.get("normalization_mapping", MEAN_STD),
            }
        )

    # ---- model (scheduler process)

    def decoder_config(self) -> ModelConfig:
        hf = AutoConfig.from_pretrained(self.smol.vlm_folder)
        base = model_config(
            self.folder,
            self.config,
            hf,
            hf.text_config,
            architecture="smolvla",
            prefix_lm=True,
            eos_from_text=True,
        )
        return replace(
            base,
            num_layers=self.smol.text.num_layers,
            rope_theta=ROPE_BASE,
            rope_scaling=None,
            embed_scale=math.sqrt(base.hidden_size),
        )

    def decoder_layout(self) -> DecoderLayout:
        return DecoderLayout(strip=POLICY_PREFIXES, skip=VISION_PARTS)

    def vision_encoder(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device
    ) -> VisionEncoder | None:
        encoder = PagedVisionEncoder(self.smol, dtype=dtype, device=device)
        encoder.load_weights(encoder.read_weights(self.folder))
        return encoder

    def action_head(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device, context_len: int
    ) -> ActionHead | None:
        return PagedActionHead(self.smol, dtype=dtype, device=device)

    def differences(self, other: ModelParts) -> list[str]:
        if not isinstance(other, SmolVLAFamily):
            return [f"family: {type(other).__name__}"]
        return [
            f"{f.name}: {getattr(self.smol, f.name)!r} != {getattr(other.smol, f.name)!r}"
            for f in fields(self.smol)
            if f.name not in _LOCATION and getattr(self.smol, f.name) != getattr(other.smol, f.name)
        ]

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        c = self.smol
        return Denoise(c.chunk_size, c.max_action_dim, c.num_steps, state_token=True)

    # ---- every process

    def tokenizer(self) -> Any:
        return load_tokenizer(self.smol.vlm_folder)

    # ---- main process

    def image_preprocessor(self, backend: str) -> ImagePreprocessor | None:
        height, width = self.spec.image_resolution
        return LeftTopPadResize(height, width)

    def policy(self) -> FlowActionPolicy:
        return FlowActionPolicy.from_folder(self.folder, self.spec, openpi=False)

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> SmolVLAFrontend:
        if convention not in ("auto", "lerobot"):
            raise ValueError(f"prompt convention {convention!r}: SmolVLA has LeRobot's only")
        newline = read_processor_files(self.folder).newline
        return SmolVLAFrontend(tokenizer, info, self.policy(), newline)

    # ---- detokenizer

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        return ChunkDecoder(self.policy())


def _check_servable(c: SmolVLAConfig) -> None:
    """What the engine does not serve yet, refused at start-up naming the setting."""
    if c.add_image_special_tokens:
        # Their embeddings are unscaled, unlike every other token's in the decoder.
        raise NotImplementedError(f"{c.folder}: add_image_special_tokens true is not served")
    if read_processor_files(c.folder).rename_map:
        raise NotImplementedError(f"{c.folder}: a preprocessor rename_map is not served")
    size = c.vision.image_size
    if c.resize_with_padding != (size, size):
        raise NotImplementedError(
            f"{c.folder}: resize_imgs_with_padding {c.resize_with_padding} is not the vision "
            f"tower's {size} x {size}"
        )
