"""Prompt text to token ids, without stalling the HTTP event loop on a long text.

A short prompt (every robot's) is tokenized inline: a thread hop would cost more than the
work. A robot sends the same few prompts frame after frame, so the ids of short prompts are
kept in a small LRU (`PromptIdCache`): in the served main process, between the other
processes' work, the tokenizer call took about 0.2 ms of a repeated frame's 8 ms TTFT, the
lookup a few microseconds. A long one goes to a worker thread with its own copy of the
tokenizer (a fast tokenizer must not be used from two threads at once), so `/health` and
every other client keep being served while it runs. A text too long to fit the context
whatever its tokens is refused before any work.
"""

from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vla_server.errors import RequestError
from vla_server.frontend.chat_prompt import chat_prompt_ids

INLINE_CHARS = 4096  # about 1k tokens: well under a millisecond of tokenizer time
# No tokenizer we serve has tokens this long on average; a text beyond context x this many
# characters cannot fit the context.
MAX_CHARS_PER_TOKEN = 64
PROMPT_CACHE_ENTRIES = 256  # distinct short prompts kept; each at most INLINE_CHARS characters


class PromptIdCache:
    """The token ids of recently seen prompt texts, least recently used dropped first."""

    def __init__(self, max_entries: int = PROMPT_CACHE_ENTRIES):
        self.max_entries = max_entries
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, text: str) -> list[int] | None:
        ids = self._ids.get(text)
        if ids is None:
            return None
        self._ids.move_to_end(text)
        return list(ids)  # a fresh list: callers extend and expand it

    def put(self, text: str, ids: list[int]) -> None:
        self._ids[text] = tuple(ids)
        self._ids.move_to_end(text)
        if len(self._ids) > self.max_entries:
            self._ids.popitem(last=False)


class TextEncoder:
    def __init__(self, tokenizer: Any, context_len: int):
        self.tokenizer = tokenizer
        self.max_chars = context_len * MAX_CHARS_PER_TOKEN
        self.context_len = context_len
        self._worker: tuple[ThreadPoolExecutor, Any] | None = None
        self.prompt_cache = PromptIdCache()

    async def encode(self, text: str, field: str = "text") -> list[int]:
        short = len(text) <= INLINE_CHARS
        ids = self.prompt_cache.get(text) if short else None
        if ids is None:
            ids = await self.run(len(text), field, lambda tokenizer: tokenizer(text)["input_ids"])
            if short:
                self.prompt_cache.put(text, ids)
        return ids

    async def chat(self, messages: list[dict[str, Any]], field: str) -> list[int]:
        """The checkpoint's chat template over `messages`, tokenized."""
        chars = sum(len(str(m.get("content", ""))) for m in messages)
        return await self.run(
            chars, field, lambda tokenizer: chat_prompt_ids(tokenizer, messages, field)
        )

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
