"""The front-end rules the pi families share: images first (before BOS), named cameras and a
robot state (`policy_inputs.py`), the statistics of one robot (no `unnorm_key`), the whole
chunk by default, and a prompt within the policy's `tokenizer_max_length`."""

from __future__ import annotations

from typing import Any

from vla_server.errors import RequestError
from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionQuery, PromptEncoder, QueryPrompt, RobotIO
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.policy_inputs import (
    camera_images,
    check_prompt_tokens,
    checked_state,
)


class PiFrontend:
    max_images: int | None = None
    image_token: str | None = None
    # pi0 / pi0.5 feed a missing camera as a masked image; pi0-FAST needs every camera.
    allow_fewer_cameras = False

    def __init__(self, tokenizer: Any, info: ModelInfo, spec: LeRobotPolicySpec):
        self.spec = spec
        self.image_token_id = info.image_token_id
        if info.image_token_id is not None and info.image_token_id < len(tokenizer):
            self.image_token = tokenizer.convert_ids_to_tokens(info.image_token_id)
        self.robot_io = RobotIO(spec.cameras, spec.state_dim, spec.chunk_size)
        self.action_dim: int | None = spec.action_dim
        self.default_num_actions = spec.chunk_size

    def prompt_text(self, text: str) -> str:
        return text

    def image_insert_at(self, ids: list[int]) -> int:
        return 0

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        return ids

    async def query_prompt(self, query: ActionQuery, encoder: PromptEncoder) -> QueryPrompt:
        self.check_query(query)
        images = camera_images(self.spec, query.image_data, self.allow_fewer_cameras)
        state = checked_state(self.spec, query.state)
        ids = await encoder.encode(self.task_text(query.instruction, state), "instruction")
        check_prompt_tokens(ids, self.spec.tokenizer_max_length, "instruction")
        return QueryPrompt(ids, images, self.state_beside(state))

    def check_query(self, query: ActionQuery) -> None:
        """Options a family's queries do not take (RequestError naming the field)."""

    def task_text(self, instruction: str, state: list[float]) -> str:
        raise NotImplementedError

    def state_beside(self, state: list[float]) -> list[float] | None:
        """The state that rides beside the prompt (None: the prompt carries it)."""
        return None

    def resolve_unnorm_key(self, unnorm_key: str | None) -> str | None:
        if unnorm_key is not None:
            raise RequestError(
                "a pi-family checkpoint has one set of statistics: give no unnorm_key",
                "unnorm_key",
            )
        return None

    def unnorm_keys(self) -> list[str]:
        return []
