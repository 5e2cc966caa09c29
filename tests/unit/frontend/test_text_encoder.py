"""TextEncoder's prompt-id cache: a cached prompt gives exactly the tokenizer's ids, as a list
of its own, and the cache holds at most its bound, dropping the least recently used first."""

from __future__ import annotations

import asyncio

from tests.support.families import family_tokenizer
from vla_server.frontend.text_encoder import INLINE_CHARS, PromptIdCache, TextEncoder
from vla_server.policies.llava.demo import demo_model_path

PROMPTS = [
    "In: What action should the robot take to pick up the red block?\n<image>\nOut:",
    "In: What action should the robot take to open the drawer?\n<image>\nOut:",
    "pick up the cup\n",
    "",
]


def _encode_all(encoder: TextEncoder, texts: list[str]) -> list[list[int]]:
    async def run() -> list[list[int]]:
        return [await encoder.encode(t) for t in texts]

    return asyncio.run(run())


def test_cached_ids_are_the_tokenizers():
    tokenizer = family_tokenizer(demo_model_path())
    encoder = TextEncoder(tokenizer, context_len=2048)
    first = _encode_all(encoder, PROMPTS)
    again = _encode_all(encoder, PROMPTS)  # every one from the cache now
    expected = [tokenizer(t)["input_ids"] for t in PROMPTS]
    assert first == expected and again == expected
    assert len(encoder.prompt_cache) == len(PROMPTS)


def test_callers_get_a_list_of_their_own():
    encoder = TextEncoder(family_tokenizer(demo_model_path()), context_len=2048)
    ids = _encode_all(encoder, PROMPTS[:1])[0]
    expected = list(ids)
    ids.append(7)  # a caller extends its prompt (an action suffix, image positions)
    assert _encode_all(encoder, PROMPTS[:1])[0] == expected
    cached = _encode_all(encoder, PROMPTS[:1])[0]
    cached.clear()
    assert _encode_all(encoder, PROMPTS[:1])[0] == expected


def test_long_texts_are_not_kept():
    encoder = TextEncoder(family_tokenizer(demo_model_path()), context_len=2048)
    text = "pick " * (INLINE_CHARS // 5 + 1)
    assert _encode_all(encoder, [text]) == [encoder.tokenizer(text)["input_ids"]]
    assert len(encoder.prompt_cache) == 0


def test_bounded_least_recently_used_first():
    cache = PromptIdCache(max_entries=2)
    cache.put("a", [1])
    cache.put("b", [2])
    assert cache.get("a") == [1]  # "a" is now the most recently used
    cache.put("c", [3])
    assert len(cache) == 2
    assert cache.get("b") is None
    assert cache.get("a") == [1] and cache.get("c") == [3]
    for i in range(10):
        cache.put(str(i), [i])
    assert len(cache) == 2
