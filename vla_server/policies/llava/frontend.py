"""How a LLaVA-style VLA is asked for actions: its chat template over one user turn."""

from __future__ import annotations

from typing import Any

from vla_server.policies.base import ActionQuery, PromptEncoder, QueryPrompt
from vla_server.policies.bin_actions.frontend import BinActionsFrontend, query_images


class LlavaFrontend(BinActionsFrontend):
    async def query_prompt(self, query: ActionQuery, encoder: PromptEncoder) -> QueryPrompt:
        images = query_images(query)
        messages = instruction_messages(query.instruction, len(images))
        return QueryPrompt(await encoder.chat(messages, "instruction"), images)


def instruction_messages(instruction: str, num_images: int) -> list[dict[str, Any]]:
    """One user turn: the instruction first and the camera images last.

    The instruction is the part that stays the same from one control tick to the next, so with
    it first the radix cache reuses its KV across frames; each new frame breaks the prefix only
    from the first image on.
    """
    parts: list[dict[str, Any]] = [{"type": "text", "text": instruction}]
    parts += [{"type": "image"} for _ in range(num_images)]
    return [{"role": "user", "content": parts}]
