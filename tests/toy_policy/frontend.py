"""The toy's prompt and action-request rules: the instruction plus a newline, the robot state
beside it (zero-padded to the head's width), the whole chunk by default, no images."""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.policies.base import (
    ActionAsk,
    ActionQuery,
    PromptEncoder,
    PromptPlan,
    QueryPrompt,
    RobotIO,
    check_chunk_share,
)


class ToyFrontend:
    image_token = None
    image_token_id = None
    max_images = 0

    def __init__(self, action_dim: int, state_dim: int, chunk_size: int, width: int):
        self.action_dim, self.width = action_dim, width
        self.robot_io = RobotIO((), state_dim, chunk_size)
        self.default_num_actions = chunk_size

    def prompt_text(self, text: str) -> str:
        return text

    def image_insert_at(self, ids: list[int]) -> int:
        return 0

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        return ids

    def plan(self, ask: ActionAsk, prompt_len: int, context_len: int) -> PromptPlan:
        if not ask.num_actions:
            if ask.state is not None:
                raise RequestError("only an action request takes a state", "state")
            return PromptPlan()
        check_chunk_share(ask.num_actions, self.robot_io.chunk_size)
        state = self._state(ask.state)
        return PromptPlan(max_new_tokens=0, state=state)

    def _state(self, state: Any) -> np.ndarray:
        dim = self.robot_io.state_dim
        if not isinstance(state, list) or len(state) != dim:
            raise RequestError(f"must be a list of {dim} numbers", "state")
        out = np.zeros(self.width, dtype=np.float32)
        out[:dim] = np.asarray(state, dtype=np.float32)
        return out

    async def query_prompt(self, query: ActionQuery, encoder: PromptEncoder) -> QueryPrompt:
        if query.image_data not in (None, []):
            raise RequestError("the toy policy takes no images", "image_data")
        ids = await encoder.encode(query.instruction + "\n", "instruction")
        return QueryPrompt(ids, [], query.state)

    def resolve_unnorm_key(self, unnorm_key: str | None) -> str | None:
        if unnorm_key is not None:
            raise RequestError("the toy policy has no statistics keys", "unnorm_key")
        return None

    def unnorm_keys(self) -> list[str]:
        return []

    def action_token_ids(self, output_ids: list[int], start: int, stop: int) -> list[Any]:
        return []

    def describe(self) -> dict[str, Any]:
        return {"kind": "toy", "action_dim": self.action_dim, "chunk_size": self.width}
