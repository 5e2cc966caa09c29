"""pi0-FAST (LeRobot's `pi0_fast`): PaliGemma generating FAST action tokens after a
`Task: ..., State: ...;` prompt; the tokens up to `|` decode into one chunk."""

from __future__ import annotations

from typing import Any

from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionDecoder, HeadSpec, Tokens
from vla_server.policies.pi0fast.detokenizer import FastActionDetokenizer
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.policies.pi0fast.frontend import Pi0FastFrontend
from vla_server.policies.pi0fast.prompt import Pi0FastPrompt
from vla_server.policies.pi_common.family import PiFamily


class Pi0FastFamily(PiFamily):
    name = "pi0fast"
    config_types = ("pi0_fast",)

    def actions(self, tokenizer: Any) -> FastActionTokenizer:
        return FastActionTokenizer.from_folder(
            self.folder, self.spec, tokenizer, self.decoder_config()
        )

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        return Tokens(self.actions(tokenizer).allowed_mask(vocab_size))

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> Pi0FastFrontend:
        prompt = Pi0FastPrompt.create(tokenizer, self.convention(convention))
        return Pi0FastFrontend(tokenizer, info, self.actions(tokenizer), prompt)

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        return FastActionDetokenizer(self.actions(tokenizer))
