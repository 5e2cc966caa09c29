"""OpenVLA's prompt conventions, for checkpoints in the Prismatic layout.

* The image has no placeholder token: its patch embeddings go right after BOS
  (`PrismaticForConditionalGeneration.forward`). A prompt may still start with the documented
  placeholder text, which is dropped, so "<image>In: ..." and "In: ..." are the same request.
* `/v1/actions` and the openpi WebSocket ask as OpenVLA's own deployment server does
  (`vla-scripts/deploy.py`): the instruction lower-cased (as in training) in the template below.
* `predict_action` appends the empty token ("▁", 29871 for Llama 2) unless the prompt already
  ends with it; action requests get the same.
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER = "<image>"
PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
EMPTY_TOKEN = "▁"


def action_prompt(instruction: str) -> str:
    return PROMPT.format(instruction=instruction.lower())


def drop_placeholder(text: str) -> str:
    """`text` without one leading image placeholder."""
    return text.removeprefix(PLACEHOLDER)


def empty_token_id(tokenizer: Any) -> int | None:
    """The id `predict_action` appends, or None when the vocabulary has no such token."""
    token_id = tokenizer.convert_tokens_to_ids(EMPTY_TOKEN)
    return token_id if token_id != tokenizer.unk_token_id else None
