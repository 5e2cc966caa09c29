"""Prompt text to token ids, without stalling the HTTP event loop on a long text.

A short prompt (every robot's) is tokenized inline: a thread hop would cost more than the
work. A long one goes to a worker thread with its own copy of the tokenizer (a fast tokenizer
must not be used from two threads at once), so `/health` and every other client keep being
served while it runs. A text too long to fit the context whatever its tokens is refused before
any work.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vla_server.errors import RequestError

INLINE_CHARS = 4096  # about 1k tokens: well under a millisecond of tokenizer time
# No tokenizer we serve has tokens this long on average; a text beyond context x this many
# characters cannot fit the context.
MAX_CHARS_PER_TOKEN = 64


class TextEncoder:
    def __init__(self, tokenizer: Any, context_len: int):
        self.tokenizer = tokenizer
        self.max_chars = context_len * MAX_CHARS_PER_TOKEN
        self.context_len = context_len
        self._worker: tuple[ThreadPoolExecutor, Any] | None = None

    async def encode(self, text: str, field: str = "text") -> list[int]:
        return await self.run(len(text), field, lambda tokenizer: tokenizer(text)["input_ids"])

    async def run(self, chars: int, field: str, work: Callable[[Any], list[int]]) -> list[int]:
        """`work(tokenizer)`, which tokenizes about `chars` characters of `field`."""
        if chars > self.max_chars:
            raise RequestError(
                f"the text has {chars} characters; the model's context of "
                f"{self.context_len} tokens cannot hold more than {self.max_chars}",
                field,
            )
        if chars <= INLINE_CHARS:
            return work(self.tokenizer)
        pool, tokenizer = self._bulk()
        return await asyncio.get_running_loop().run_in_executor(pool, work, tokenizer)

    def _bulk(self) -> tuple[ThreadPoolExecutor, Any]:
        if self._worker is None:
            pool = ThreadPoolExecutor(1, thread_name_prefix="tokenize")
            self._worker = (pool, copy.deepcopy(self.tokenizer))
        return self._worker
