"""SmolVLA's front-end rules: LeRobot's prompt (`processor_smolvla.py`) as the engine's prompt.

* Images first, one per camera present, in the config's camera order. A camera left out is
  left out of the prompt: with `empty_cameras` 0 LeRobot skips it; with `empty_cameras` > 0 it
  feeds an empty image whose tokens are masked, which no token attends to and which advances no
  position (positions are `cumsum(mask) - 1`), so leaving it out is the same computation.
* Then the instruction with a trailing "\\n" (LeRobot's newline step, when the folder's
  preprocessor has it), tokenized without BOS and without padding: LeRobot pads to
  `tokenizer_max_length` but masks the padding, which is again the same as leaving it out. A
  longer instruction is refused (LeRobot would cut it silently).
* Then one state token: an action request's prompt ends with a placeholder
  (`action_prompt_ids`), whose position the plan names (`PromptPlan.state_position`); the node
  writes the state's hash-derived id there and the prefill puts the head's `state_proj` of the
  normalised state in its place. Images and text are one bidirectional prefix that does not see
  the state (`prefix_lm_len` = the prompt's length - 1); the state token sees all of them.
* The chunk is denoised from seeded noise, not sampled; it is unnormalised with the action
  statistics of the folder's postprocessor (`pi_common.flow_actions`), and real-time chunking's
  previous chunk is normalised with them (`prev_chunk_target`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionAsk, ActionQuery, PromptPlan, check_chunk_share
from vla_server.policies.pi_common.flow_actions import FlowActionPolicy, FlowStatistics
from vla_server.policies.pi_common.frontend import PiFrontend
from vla_server.policies.pi_common.policy_inputs import checked_state


class SmolVLAFrontend(FlowStatistics, PiFrontend):
    allow_fewer_cameras = True

    def __init__(self, tokenizer: Any, info: ModelInfo, policy: FlowActionPolicy, newline: bool):
        super().__init__(tokenizer, info, policy.spec)
        self.policy, self.newline = policy, newline
        # Any id: the node replaces it by the state's pad id (`PromptPlan.state_position`).
        self.state_placeholder = int(tokenizer.pad_token_id or 0)

    def check_query(self, query: ActionQuery) -> None:
        for name in ("relaxed_decoding", "return_token_ids", "temperature"):
            if getattr(query, name):
                raise RequestError(
                    "a SmolVLA chunk is denoised from noise (set by seed), not sampled from tokens",
                    name,
                )

    def task_text(self, instruction: str, state: list[float]) -> str:
        if self.newline and not instruction.endswith("\n"):
            return instruction + "\n"
        return instruction

    def state_beside(self, state: list[float]) -> list[float] | None:
        return state  # the plan normalises it into the state token

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        return [*ids, self.state_placeholder]

    def plan(self, ask: ActionAsk, prompt_len: int, context_len: int) -> PromptPlan:
        if not ask.num_actions:
            if ask.state is not None:
                raise RequestError("only an action request (num_actions) takes a state", "state")
            return PromptPlan(prefix_lm_len=prompt_len)
        check_chunk_share(ask.num_actions, self.policy.horizon)
        state = self.policy.state_vector(checked_state(self.spec, ask.state))
        if prompt_len < 2:
            raise RequestError("an action prompt needs images or text before its state", "text")
        # The chunk is denoised over the prompt's K/V: no new tokens.
        return PromptPlan(
            max_new_tokens=0,
            prefix_lm_len=prompt_len - 1,
            state=state,
            state_position=prompt_len - 1,
        )

    def prev_chunk_target(self, prev_chunk: np.ndarray) -> np.ndarray:
        return self.policy.prev_chunk_target(prev_chunk)

    def action_token_ids(self, output_ids: list[int], start: int, stop: int) -> list[Any]:
        return []

    def describe(self) -> dict[str, Any]:
        return self.policy.describe()
