"""pi0's and pi0.5's front-end rules: the task prompt (`prompt.py`), a chunk that is denoised
rather than sampled (no token budget, no token options), pi0's state beside the prompt for its
state token, cameras that may be missing (masked, as LeRobot feeds them), and real-time
chunking's previous chunk in the head's space (`FlowActionPolicy.prev_chunk_target`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionAsk, ActionQuery, PromptPlan, check_chunk_share
from vla_server.policies.pi0.prompt import flow_prompt_text
from vla_server.policies.pi_common.flow_actions import FlowActionPolicy, FlowStatistics
from vla_server.policies.pi_common.frontend import PiFrontend
from vla_server.policies.pi_common.policy_inputs import checked_state


class Pi0Frontend(FlowStatistics, PiFrontend):
    allow_fewer_cameras = True

    def __init__(self, tokenizer: Any, info: ModelInfo, policy: FlowActionPolicy, convention: str):
        super().__init__(tokenizer, info, policy.spec)
        self.policy, self.convention = policy, convention

    def check_query(self, query: ActionQuery) -> None:
        for name in ("relaxed_decoding", "return_token_ids", "temperature"):
            if getattr(query, name):
                raise RequestError(
                    "a pi0 / pi0.5 chunk is denoised from noise (set by seed), not sampled "
                    "from tokens",
                    name,
                )

    def task_text(self, instruction: str, state: list[float]) -> str:
        return flow_prompt_text(self.policy, instruction, state, self.convention)

    def state_beside(self, state: list[float]) -> list[float] | None:
        return None if self.policy.state_in_prompt else state

    def plan(self, ask: ActionAsk, prompt_len: int, context_len: int) -> PromptPlan:
        beside = bool(ask.num_actions) and not self.policy.state_in_prompt
        if ask.state is not None and not beside:
            raise RequestError(
                "only a pi0 action request takes the state beside its prompt (pi0-FAST's and "
                "pi0.5's prompts carry it)",
                "state",
            )
        if not ask.num_actions:
            return PromptPlan(prefix_lm_len=prompt_len)
        check_chunk_share(ask.num_actions, self.policy.horizon)
        state = None
        if beside:
            state = self.policy.state_vector(checked_state(self.spec, ask.state))
        # The chunk is denoised over the prompt's K/V: no new tokens.
        return PromptPlan(max_new_tokens=0, prefix_lm_len=prompt_len, state=state)

    def prev_chunk_target(self, prev_chunk: np.ndarray) -> np.ndarray:
        return self.policy.prev_chunk_target(prev_chunk)

    def action_token_ids(self, output_ids: list[int], start: int, stop: int) -> list[Any]:
        return []

    def describe(self) -> dict[str, Any]:
        return self.policy.describe()
