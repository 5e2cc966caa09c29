"""OpenVLA's prompt conventions (`prompt.py`): no image placeholder, the one image right after
BOS, `predict_action`'s prompt with the empty token appended for actions."""

from __future__ import annotations

from typing import Any

from vla_server.io_struct import ModelInfo
from vla_server.policies.base import ActionQuery, PromptEncoder, QueryPrompt
from vla_server.policies.bin_actions.action_tokenizer import ActionTokenizer
from vla_server.policies.bin_actions.frontend import BinActionsFrontend, query_images
from vla_server.policies.openvla import prompt


class OpenVLAFrontend(BinActionsFrontend):
    max_images = 1

    def __init__(self, tokenizer: Any, info: ModelInfo, actions: ActionTokenizer | None):
        super().__init__(tokenizer, info, actions)
        self.image_token = prompt.PLACEHOLDER
        self.image_token_id = None
        self.empty_token_id = prompt.empty_token_id(tokenizer)

    def prompt_text(self, text: str) -> str:
        return prompt.drop_placeholder(text)

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        suffix = self.empty_token_id
        if suffix is None or (ids and ids[-1] == suffix):
            return ids
        return [*ids, suffix]

    async def query_prompt(self, query: ActionQuery, encoder: PromptEncoder) -> QueryPrompt:
        images = query_images(query)
        ids = await encoder.encode(prompt.action_prompt(query.instruction), "instruction")
        return QueryPrompt(ids, images)
