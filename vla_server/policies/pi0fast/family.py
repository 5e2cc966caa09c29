"""pi0-FAST (LeRobot's `pi0_fast`): PaliGemma generating FAST action tokens after a
`Task: ..., State: ...;` prompt; the tokens up to `|` decode into one chunk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionDecoder, HeadSpec, PromptLayout, Tokens
from vla_server.policies.pi0fast.detokenizer import FastActionDetokenizer
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.policies.pi0fast.frontend import Pi0FastFrontend
from vla_server.policies.pi0fast.prompt import Pi0FastPrompt
from vla_server.policies.pi_common.family import PiFamily


class Pi0FastFamily(PiFamily):
    name = "pi0fast"
    config_types = ("pi0_fast",)

    @classmethod
    def tiny_checkpoints(cls) -> dict[str, Callable[[], Path]]:
        from vla_server.policies.pi0fast.tiny import pi0fast_model_path

        return {"pi0fast": pi0fast_model_path}

    def prompt_layout(self) -> PromptLayout | None:
        """Cameras first, then the task and a fixed mid-range discretised state; the whole
        prompt is one bidirectional prefix, so only an identical prompt reuses its KV. Relaxed
        decoding: a random tiny model seldom ends a chunk on its exact length."""
        state = " ".join(["128"] * self.spec.state_dim)
        return PromptLayout(
            "Task: {instruction}, State: " + state + ";\n",
            ("pick up the red block", "open the drawer"),
            images_lead=False,
            cameras=len(self.spec.cameras),
            extra={"relaxed_decoding": True},
        )

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
