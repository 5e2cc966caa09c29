"""Chunked prefill keeps a running action stream moving while a long new prompt is prefilled.

A short-prompt stream and a 400-token prompt arrive together. With `--chunked-prefill-size 16` its
prefill takes 25 steps, and every one of them also decodes the running stream (mixed batches),
so the stream gets at least one token per chunk before the long prompt's first token (a policy
that paused decodes for the prefill would give it one or two). Counted in tokens the stream
received, never in time.
"""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest

from tests.integration.sched_helpers import body, pause, resume, wait_idle, wait_pending
from tests.server_process import run_server

CHUNK = 16
LONG = 400
STREAM_NEW = 400


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("chunked"),
        "--chunked-prefill-size",
        str(CHUNK),
        "--max-total-tokens",
        "2048",
    ) as s:
        yield s


async def _stream_tokens(c: httpx.AsyncClient, req: dict, seen: list[int]) -> None:
    """Consumes a /generate stream, appending each chunk's token count to `seen`."""
    async with c.stream("POST", "/generate", json={**req, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                seen.append(len(json.loads(line[6:])["output_ids"]))


async def _tokens_before_the_long_prompts_first(c: httpx.AsyncClient) -> int:
    """Tokens the stream has when the long prompt's first token arrives. Both are held back by
    a pause and released together, so the count does not depend on how fast the main process
    handed the long prompt over."""
    await pause(c, "in_place")
    running: list[int] = []
    stream = asyncio.create_task(_stream_tokens(c, body(list(range(6, 10)), STREAM_NEW), running))
    await wait_pending(c, 1)
    long_seen: list[int] = []
    long = asyncio.create_task(
        _stream_tokens(c, body([6 + i % 400 for i in range(LONG)], 2), long_seen)
    )
    await wait_pending(c, 2)
    await resume(c)
    while not long_seen:
        assert not long.done(), "the long prompt's stream ended without a token"
        await asyncio.sleep(0.001)
    during = sum(running)
    await asyncio.gather(stream, long)
    assert sum(running) == STREAM_NEW
    return during


async def test_running_stream_advances_while_a_long_prompt_is_prefilled(node):
    async with node.async_client() as c:
        during = await _tokens_before_the_long_prompts_first(c)
        await wait_idle(c)
    chunks = math.ceil(LONG / CHUNK)
    # one decode per prefill step; a step or two of slack for when the client reads them
    assert during >= chunks - 3, f"{during} tokens during {chunks} prefill chunks"
