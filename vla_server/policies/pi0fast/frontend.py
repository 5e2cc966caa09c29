"""pi0-FAST's front-end rules: the `Task: ..., State: ...;` prompt (`prompt.py`, in the
LeRobot or openpi convention), the action tail appended to it, a token budget of the policy's
`max_decoding_steps`, `|` as the stop, and a causal tail after the bidirectional prefix."""

from __future__ import annotations

from typing import Any

from vla_server.errors import RequestError
from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionAsk, PromptPlan, check_chunk_share
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.policies.pi0fast.prompt import Pi0FastPrompt
from vla_server.policies.pi_common.frontend import PiFrontend


class Pi0FastFrontend(PiFrontend):
    def __init__(
        self, tokenizer: Any, info: ModelInfo, fast: FastActionTokenizer, prompt: Pi0FastPrompt
    ):
        super().__init__(tokenizer, info, fast.spec)
        self.fast, self.prompt = fast, prompt

    def task_text(self, instruction: str, state: list[float]) -> str:
        return self.prompt.task_text(instruction, self.fast.state_bins(state))

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        return [*ids, *self.prompt.action_tail()]

    def plan(self, ask: ActionAsk, prompt_len: int, context_len: int) -> PromptPlan:
        if ask.state is not None:
            raise RequestError(
                "a pi0-FAST prompt carries the state (discretised into its text)", "state"
            )
        if not ask.num_actions:
            return PromptPlan(prefix_lm_len=prompt_len)
        check_chunk_share(ask.num_actions, self.fast.horizon)
        # The reference generates "Action: " itself, within max_decoding_steps.
        causal = self.prompt.causal_tokens
        budget = min(self.spec.max_decoding_steps - causal, context_len - prompt_len)
        if budget < 1:
            raise RequestError("the prompt leaves no room for action tokens", "num_actions")
        return PromptPlan(
            max_new_tokens=budget,
            stop_token_ids=self.fast.end_ids,
            prefix_lm_len=prompt_len - causal,
            position_shift=self.prompt.position_shift,
        )

    def action_token_ids(self, output_ids: list[int], start: int, stop: int) -> list[Any]:
        """The chunk's FAST tokens (the whole chunk decodes at once)."""
        band = self.fast.fast_ids()
        return [t for t in output_ids if t in band]

    def describe(self) -> dict[str, Any]:
        return self.fast.describe()
