"""OpenVLA and other Prismatic-layout VLAs: fused timm towers and a projector before a Llama-2
decoder, one image right after BOS, `predict_action`'s prompt and its bin actions. The folder's
`auto_map` names remote code; it is never run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from vla_server.io_struct import ModelInfo
from vla_server.model.config import ModelConfig, model_config
from vla_server.model.parts import VisionEncoder
from vla_server.model.tokenizer import load_tokenizer
from vla_server.model.weight_loader import DecoderLayout
from vla_server.multimodal.preprocess_config import read_image_processor_dict
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.policies.base import ActionDecoder, HeadSpec, PolicyFamily, PromptLayout, Tokens
from vla_server.policies.bin_actions.action_tokenizer import load_bin_actions
from vla_server.policies.bin_actions.detokenizer import BinActionDecoder
from vla_server.policies.openvla.frontend import OpenVLAFrontend
from vla_server.policies.openvla.prismatic_config import PRISMATIC_MODEL_TYPES
from vla_server.policies.openvla.prismatic_preprocess import PrismaticPreprocess
from vla_server.policies.openvla.prismatic_vision import (
    PRISMATIC_VISION_PREFIXES,
    PrismaticVisionEncoder,
)
from vla_server.policies.openvla.prompt import PROMPT


class OpenVLAFamily(PolicyFamily):
    name = "openvla"
    config_types = PRISMATIC_MODEL_TYPES

    def text_config(self) -> Any:
        """The decoder config: `text_config` (only what differs from the defaults) parsed by
        the transformers class of its own `model_type`."""
        from transformers import CONFIG_MAPPING

        text_raw = dict(self.config.get("text_config") or {})
        text_type = text_raw.pop("model_type", "llama")
        if text_type not in CONFIG_MAPPING:
            raise NotImplementedError(f"text_config model_type {text_type!r} is not known")
        return CONFIG_MAPPING[text_type](**text_raw)

    def decoder_config(self) -> ModelConfig:
        text = self.text_config()
        architecture = (self.config.get("architectures") or [type(text).__name__])[0]
        return model_config(self.folder, self.config, text, text, architecture=architecture)

    def decoder_layout(self) -> DecoderLayout:
        return DecoderLayout(skip=PRISMATIC_VISION_PREFIXES)

    def vision_encoder(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device
    ) -> VisionEncoder | None:
        return PrismaticVisionEncoder.from_folder(self.folder, dtype=dtype, device=device)

    def tokenizer(self) -> Any:
        # Handed the decoder config: transformers cannot read this config.json's type.
        return load_tokenizer(self.folder, self.text_config())

    def image_preprocessor(self, backend: str) -> ImagePreprocessor | None:
        cfg = PrismaticPreprocess.from_dict(read_image_processor_dict(self.folder))
        return dataclasses.replace(cfg, resize_backend=backend)

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        actions = load_bin_actions(self.folder, tokenizer)
        return None if actions is None else Tokens(actions.allowed_mask(vocab_size))

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> OpenVLAFrontend:
        return OpenVLAFrontend(tokenizer, info, load_bin_actions(self.folder, tokenizer))

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        actions = load_bin_actions(self.folder, tokenizer)
        return None if actions is None else BinActionDecoder(actions)

    def prompt_layout(self) -> PromptLayout | None:
        # The image sits right after BOS, before any text.
        return PromptLayout(PROMPT, ("pick up the red block", "open the drawer"), images_lead=True)

    def reference_predict(self) -> Callable[..., Any] | None:
        """OpenVLA's `predict_action` (timm towers, transformers' Llama) in one process. The
        oracle lives with the tests and ships in no wheel: a run from a checkout finds it."""
        try:
            from tests.support.prismatic_ref.oracle_env import reference_predict
        except ImportError as e:
            raise SystemExit(
                "the reference needs the repository checkout (tests/support/prismatic_ref); "
                "run from the repository root"
            ) from e
        return reference_predict
