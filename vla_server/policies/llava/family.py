"""Hugging Face decoders (Llama, Qwen2, Gemma) and LLaVA-style VLAs on them (CLIP/SigLIP tower,
MLP projector), the embedded demo among them: transformers' own config classes parse the folder,
images follow the chat template's placeholder, and actions, when the folder declares them, are
bin tokens (`bin_actions/`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vla_server.io_struct import ModelInfo
from vla_server.model.config import ModelConfig, model_config
from vla_server.model.hf_tower import VISION_PREFIXES
from vla_server.model.parts import VisionEncoder
from vla_server.model.weight_loader import DecoderLayout
from vla_server.multimodal.preprocess import HfImagePreprocessor
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.policies.base import ActionDecoder, HeadSpec, PolicyFamily, PromptLayout, Tokens
from vla_server.policies.bin_actions.action_tokenizer import load_bin_actions
from vla_server.policies.bin_actions.detokenizer import BinActionDecoder
from vla_server.policies.llava.frontend import LlavaFrontend
from vla_server.policies.llava.vision import LlavaVisionEncoder

# The instruction before the image: a new frame reuses the instruction's prefix KV, and
# another instruction meets a repeated frame's embedding in the embedding cache only.
PROMPT_LAYOUT = PromptLayout(
    "In: {instruction}\n<image>\nOut:",
    (
        "What action should the robot take to pick up the red block?",
        "What action should the robot take to open the drawer?",
    ),
    images_lead=False,
)


class LlavaFamily(PolicyFamily):
    name = "llava"
    config_types = ("llava", "llama", "qwen2", "gemma")

    @classmethod
    def tiny_checkpoints(cls) -> dict[str, Callable[[], Path]]:
        from vla_server.policies.llava.demo import aloha_demo_model_path, demo_model_path

        return {"demo": demo_model_path, "demo-aloha": aloha_demo_model_path}

    def prompt_layout(self) -> PromptLayout | None:
        return PROMPT_LAYOUT if self.has_vision else None

    def _hf(self) -> tuple[Any, Any]:
        """(transformers' config of the folder, its decoder config)."""
        from transformers import AutoConfig

        hf = AutoConfig.from_pretrained(str(self.folder), trust_remote_code=False)
        return hf, getattr(hf, "text_config", None) or hf

    @property
    def has_vision(self) -> bool:
        return "vision_config" in self.config

    def decoder_config(self) -> ModelConfig:
        hf, text = self._hf()
        architecture = (self.config.get("architectures") or [type(hf).__name__])[0]
        image_token = getattr(hf, "image_token_id", None) if self.has_vision else None
        return model_config(
            self.folder,
            self.config,
            hf,
            text,
            architecture=architecture,
            image_token_id=image_token,
        )

    def decoder_layout(self) -> DecoderLayout:
        return DecoderLayout(skip=VISION_PREFIXES)

    def vision_encoder(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device
    ) -> VisionEncoder | None:
        if not self.has_vision:
            return None
        return LlavaVisionEncoder.from_folder(self.folder, dtype=dtype, device=device)

    def image_preprocessor(self, backend: str) -> ImagePreprocessor | None:
        if not self.has_vision:
            return None
        cfg = PreprocessConfig.from_folder(self.folder)
        return HfImagePreprocessor(dataclasses.replace(cfg, resize_backend=backend))

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        actions = load_bin_actions(self.folder, tokenizer)
        return None if actions is None else Tokens(actions.allowed_mask(vocab_size))

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> LlavaFrontend:
        return LlavaFrontend(tokenizer, info, load_bin_actions(self.folder, tokenizer))

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        actions = load_bin_actions(self.folder, tokenizer)
        return None if actions is None else BinActionDecoder(actions)
