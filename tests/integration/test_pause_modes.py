"""Pausing a live node that streams: with `retract` the running requests hand their KV back and
re-queue (the cache can then be flushed); after `continue_generation` every stream ends with
the greedy output it has when nothing interrupts it. The test waits for states that stay true:
every stream has delivered tokens before the pause, and the paused node stays as it is.

The other modes and their rules (`in_place` keeps requests resident and refuses flush and
weight updates; `abort`; a weight update flushes the cache) are unit tests on the scheduling
core: tests/unit/scheduler/test_sched_control.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.support.async_node import (
    POLL_TIMEOUT_S,
    body,
    internal,
    json_of,
    pause,
    resume,
    wait_idle,
)
from tests.support.server import run_server

NEW = 400  # long enough to be caught running (context 512)
PROMPTS = [[30 + i, 41, 52, 63 + i] for i in range(3)]
SEEN_TOKENS = 5  # every stream has produced this many tokens before the pause


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path, tmp_path_factory.mktemp("pause"), "--max-total-tokens", "4096"
    ) as s:
        yield s


@pytest.fixture(scope="module")
def uninterrupted(node) -> list[list[int]]:
    async def run() -> list[list[int]]:
        async with node.async_client() as c:
            outs = await asyncio.gather(
                *(json_of(c.post("/generate", json=body(p, NEW))) for p in PROMPTS)
            )
        return [o["output_ids"] for o in outs]

    return asyncio.run(run())


class Streams:
    """The prompts streamed side by side; the tokens each has delivered so far."""

    def __init__(self, c: httpx.AsyncClient):
        self.got: list[list[int]] = [[] for _ in PROMPTS]
        self.tasks = [
            asyncio.create_task(self._consume(c, p, got))
            for p, got in zip(PROMPTS, self.got, strict=True)
        ]

    @staticmethod
    async def _consume(c: httpx.AsyncClient, ids: list[int], got: list[int]) -> dict[str, Any]:
        last: dict[str, Any] = {}
        async with c.stream("POST", "/generate", json={**body(ids, NEW), "stream": True}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    last = json.loads(line.removeprefix("data: "))
                    got[:] = last["output_ids"]  # each chunk carries the ids so far
        return last

    async def wait_started(self) -> None:
        end = time.monotonic() + POLL_TIMEOUT_S
        while min(len(g) for g in self.got) < SEEN_TOKENS:
            assert time.monotonic() < end, "the streams did not start"
            await asyncio.sleep(0.002)

    async def finish(self) -> list[dict[str, Any]]:
        return [await t for t in self.tasks]


async def test_retract_frees_the_kv_and_the_cache_can_be_flushed(node, uninterrupted):
    async with node.async_client() as c:
        before = (await internal(c))["num_retractions"]
        streams = Streams(c)
        await streams.wait_started()
        await pause(c, "retract")
        state = await internal(c)
        assert state["paused"]
        assert state["num_running_reqs"] == 0, "a request ended before the pause"
        assert state["num_waiting_reqs"] == len(PROMPTS)
        assert state["num_retractions"] - before == len(PROMPTS)
        assert state["kv_pool"]["used"] == 0
        r = await c.post("/flush_cache")
        assert r.status_code == 200 and r.json()["success"], r.text
        flushed = (await internal(c))["kv_pool"]
        await resume(c)
        lasts = await streams.finish()
        await wait_idle(c)
    assert flushed["used"] == flushed["cached"] == 0 and flushed["free"] == flushed["total"]
    assert streams.got == uninterrupted
    assert all(last["meta_info"]["num_retractions"] == 1 for last in lasts)
    assert all(last["meta_info"]["finish_reason"]["type"] == "length" for last in lasts)
