"""The toy policy family: a Llama decoder under `config.json`'s `decoder`, and a denoising
head (`head.py`). Importing this module registers it."""

from __future__ import annotations

from typing import Any

import torch

from tests.toy_policy.decoder import ToyDecoder
from tests.toy_policy.frontend import ToyFrontend
from tests.toy_policy.head import PREFIX, ToyHead
from vla_server.io_struct import ModelInfo
from vla_server.model.config import ModelConfig, model_config
from vla_server.model.parts import ActionHead
from vla_server.model.tokenizer import load_tokenizer
from vla_server.model.weight_loader import DecoderLayout
from vla_server.policies.base import ActionDecoder, Denoise, HeadSpec, PolicyFamily
from vla_server.policies.registry import register

CONFIG_TYPE = "toy_policy"


class ToyFamily(PolicyFamily):
    name = "toy"
    config_types = (CONFIG_TYPE,)

    def _text(self) -> Any:
        from transformers import LlamaConfig

        return LlamaConfig(**self.config["decoder"])

    def decoder_config(self) -> ModelConfig:
        text = self._text()
        return model_config(
            self.folder, self.config, text, text, architecture="ToyPolicy", eos_from_text=True
        )

    def decoder_layout(self) -> DecoderLayout:
        return DecoderLayout(skip=(PREFIX,))

    def action_head(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device, context_len: int
    ) -> ActionHead | None:
        kv_dim = config.num_kv_heads * config.head_dim
        return ToyHead(self.config["chunk_size"], self.config["width"], kv_dim, device)

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        c = self.config
        return Denoise(c["chunk_size"], c["width"], c["num_steps"])

    def tokenizer(self) -> Any:
        return load_tokenizer(self.folder, self._text())

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> ToyFrontend:
        c = self.config
        return ToyFrontend(c["action_dim"], c["state_dim"], c["chunk_size"], c["width"])

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        return ToyDecoder(self.config["action_dim"])


register(ToyFamily)
