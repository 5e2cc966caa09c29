"""The front-end rules of a checkpoint whose actions are bin tokens (or that has none): one
action is `action_dim` consecutive tokens, so an action request's budget is `num_actions` of
them within the context. Families with their own prompt conventions subclass it."""

from __future__ import annotations

from typing import Any

from vla_server.errors import RequestError
from vla_server.io_struct import ModelInfo
from vla_server.policies.base import (
    ActionAsk,
    ActionQuery,
    PromptEncoder,
    PromptPlan,
    QueryPrompt,
    RobotIO,
)
from vla_server.policies.bin_actions.action_tokenizer import ActionTokenizer

MAX_ACTIONS_PER_REQUEST = 256


class BinActionsFrontend:
    max_images: int | None = None
    robot_io: RobotIO | None = None
    default_num_actions = 1

    def __init__(self, tokenizer: Any, info: ModelInfo, actions: ActionTokenizer | None):
        self.actions = actions
        self.action_dim = None if actions is None else actions.action_dim
        self.image_token_id = info.image_token_id
        self.image_token: str | None = None
        if info.image_token_id is not None:
            self.image_token = tokenizer.convert_ids_to_tokens(info.image_token_id)
        self.bos_token_id = tokenizer.bos_token_id

    def prompt_text(self, text: str) -> str:
        return text

    def image_insert_at(self, ids: list[int]) -> int:
        return 1 if ids and ids[0] == self.bos_token_id else 0

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        return ids

    def plan(self, ask: ActionAsk, prompt_len: int, context_len: int) -> PromptPlan:
        if ask.state is not None:
            raise RequestError("this model reads no robot state", "state")
        if not ask.num_actions or self.action_dim is None:
            return PromptPlan()
        dim = self.action_dim
        limit = min(MAX_ACTIONS_PER_REQUEST, (context_len - prompt_len) // dim)
        if not 1 <= ask.num_actions <= limit:
            raise RequestError(
                f"must be in [1, {limit}] for this prompt ({dim} tokens per action, context "
                f"length {context_len})",
                "num_actions",
            )
        return PromptPlan(max_new_tokens=ask.num_actions * dim, tokens_per_action=dim)

    async def query_prompt(self, query: ActionQuery, encoder: PromptEncoder) -> QueryPrompt:
        raise NotImplementedError

    def resolve_unnorm_key(self, unnorm_key: str | None) -> str | None:
        if self.actions is None:
            return unnorm_key
        try:
            return self.actions.resolve_unnorm_key(unnorm_key)
        except ValueError as e:
            raise RequestError(str(e), "unnorm_key") from None

    def unnorm_keys(self) -> list[str]:
        return [] if self.actions is None else self.actions.unnorm_keys()

    def action_token_ids(self, output_ids: list[int], start: int, stop: int) -> list[Any]:
        """The bin ids of each of those actions."""
        d = self.action_dim or 0
        return [output_ids[i * d : (i + 1) * d] for i in range(start, stop)]

    def describe(self) -> dict[str, Any]:
        if self.actions is None:
            return {}
        return {
            "action_dim": self.actions.action_dim,
            "n_bins": self.actions.n_bins,
            "bin_token_ids": [self.actions.first, self.actions.end - 1],
            "unnorm_keys": self.actions.unnorm_keys(),
        }


def query_images(query: ActionQuery) -> list[Any]:
    """The images of a query to a model without named cameras."""
    for name in ("state", "relaxed_decoding"):
        if getattr(query, name):
            raise RequestError("only policies with a robot state and token chunks take it", name)
    given = query.image_data if isinstance(query.image_data, list) else [query.image_data]
    images = [im for im in given if im is not None]
    if not images:
        raise RequestError("an action query needs at least one image", "image_data")
    return images
