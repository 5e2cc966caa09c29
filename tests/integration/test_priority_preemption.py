"""Priorities on a live node with `--max-running-requests 4`: a more important request preempts a
running one by retraction within one scheduling step, the retracted request still produces the
greedy output it produces alone, a gap within the threshold does not preempt (but still jumps
the queue), the order flips with `--schedule-low-priority-values-first`,
`--max-queued-requests` rejects by priority, and KV pressure retracts the lowest priority first.

`meta_info.queue_steps` is the number of batches the scheduler launched between ingesting the
request and launching the batch that carries its first prefill chunk (step_builder._make_batch:
the launch counter then minus the counter at arrival). 0 means the request rode the very first
batch built after its arrival, i.e. it was admitted (preempting if it had to) at the first
opportunity; "running within one scheduling step of its arrival" is queue_steps <= 1.

Races with the clock are avoided with `pause_generation in_place`: the saturating requests are
released together, then frozen while the test checks that all of them run; a request sent while
paused waits in the main process and reaches the scheduler right after `continue_generation`,
when every low-priority request still has hundreds of tokens to go.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.integration.sched_helpers import (
    body,
    finish_type,
    internal,
    json_of,
    meta,
    metric,
    resume,
    saturate,
    wait_idle,
    wait_pending,
    wait_until,
)
from tests.server_process import run_server

LOW_NEW = 440  # long enough to keep the 4 slots busy while the test acts (context 512)
LOWS = [[20 + i, 31, 47, 52 + i, 60] for i in range(4)]
HIGH = [200, 201, 202, 7, 9]
MAX_RUNNING = 4
BASE_ARGS = (
    "--max-running-requests",
    str(MAX_RUNNING),
    "--enable-priority-scheduling",
    "--max-total-tokens",
    "4096",
)


@dataclass
class Node:
    server: Any
    alone: list[list[int]]  # each low prompt's greedy output when nothing preempts it


async def alone_outputs(server: Any) -> list[list[int]]:
    outs = []
    async with server.async_client() as c:
        for ids in LOWS:
            out = await json_of(c.post("/generate", json=body(ids, LOW_NEW)))
            assert meta(out)["num_retractions"] == 0
            outs.append(out["output_ids"])
    return outs


@pytest.fixture(scope="module")
def high_first(llama_path, tmp_path_factory):
    with run_server(llama_path, tmp_path_factory.mktemp("prio"), *BASE_ARGS) as s:
        yield Node(s, asyncio.run(alone_outputs(s)))


@pytest.fixture(scope="module")
def low_first(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("prio-low-first"),
        *BASE_ARGS,
        "--schedule-low-priority-values-first",
        "--max-queued-requests",
        "4",
    ) as s:
        yield Node(s, asyncio.run(alone_outputs(s)))


async def saturate_low(c: httpx.AsyncClient, priority: int, news: list[int] | None = None) -> list:
    """Every running slot busy with a long greedy request of `priority`; returns paused."""
    news = news or [LOW_NEW] * MAX_RUNNING
    return await saturate(
        c, [body(ids, n, priority=priority) for ids, n in zip(LOWS, news, strict=True)]
    )


async def stream_events(c: httpx.AsyncClient, req: dict, events: list[str], name: str) -> dict:
    """Stream `req`, noting `name` in `events` at its first token; return the last chunk."""
    last: dict = {}
    async with c.stream("POST", "/generate", json={**req, "stream": True}) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                if not last:
                    events.append(name)
                last = json.loads(line.removeprefix("data: "))
    return last


async def test_gap_within_threshold_does_not_preempt_but_jumps_the_queue(high_first):
    """Priority 10 over 0 is not above the default threshold 10: it waits for a free slot, yet
    takes it before an earlier priority-0 request (queue order is priority, then arrival)."""
    events: list[str] = []
    async with high_first.server.async_client() as c:
        before = (await internal(c))["num_retractions"]
        # The first low frees one slot after 300 tokens; the next slot frees 100 tokens later,
        # when the mid request (100 tokens) ends.
        lows = await saturate_low(c, 0, [300] + [LOW_NEW] * 3)
        queued_low = asyncio.create_task(
            stream_events(c, body([300, 301, 302], 8, priority=0), events, "queued low")
        )
        await wait_pending(c, MAX_RUNNING + 1)
        await resume(c)
        await wait_until(c, lambda s: s["num_waiting_reqs"] == 1, "the queued low request")
        mid = await stream_events(c, body(HIGH, 100, priority=10), events, "mid")
        await queued_low
        outs = [await json_of(t) for t in lows]
        after = await wait_idle(c)
    assert after["num_retractions"] == before
    assert all(meta(o)["num_retractions"] == 0 for o in outs)
    assert meta(mid)["queue_steps"] > 1, "it waited for a slot instead of preempting"
    assert events == ["mid", "queued low"]


async def check_preemption(node: Node, low: int, high: int) -> None:
    async with node.server.async_client() as c:
        before = (await internal(c))["num_retractions"]
        lows = await saturate_low(c, low)
        hi_task = asyncio.create_task(c.post("/generate", json=body(HIGH, 16, priority=high)))
        await wait_pending(c, MAX_RUNNING + 1)
        await resume(c)
        try:
            hi = await json_of(hi_task)
            outs = [await json_of(t) for t in lows]
        except httpx.HTTPError as e:
            await asyncio.gather(*lows, return_exceptions=True)
            # short traceback: pytest 9 on CPython 3.11.7 may crash rendering httpx's frames
            raise AssertionError(f"the node failed while preempting: {e!r}") from None
        after = await wait_idle(c)
        gauge = await metric(c, "vla_num_retractions")
    assert gauge == after["num_retractions"]
    assert meta(hi)["queue_steps"] <= 1, meta(hi)
    assert finish_type(hi) == "length"
    retracted = [o for o in outs if meta(o)["num_retractions"] >= 1]
    assert retracted, "a running low-priority request should have been preempted"
    assert after["num_retractions"] - before == sum(meta(o)["num_retractions"] for o in outs)
    # Every low request, the retracted ones recomputed from their prefix, ends as if alone.
    assert [o["output_ids"] for o in outs] == node.alone
    assert all(finish_type(o) == "length" for o in outs)
    assert after["kv_pool"]["used"] == 0


async def test_high_priority_preempts_within_one_step(high_first):
    await check_preemption(high_first, low=0, high=100)


async def test_max_queued_requests_rejects_by_priority(low_first):
    """Queue bound 4, smaller values first: a worse or equal newcomer gets a 503 (the queued
    request stays); a better one evicts the worst queued request, which ends with a 503."""
    async with low_first.server.async_client() as c:
        lows = await saturate_low(c, 50)
        # gaps within the threshold: these wait instead of preempting
        queued = {
            p: asyncio.create_task(c.post("/generate", json=body([300, p], 8, priority=p)))
            for p in (45, 46, 47, 48)
        }
        await wait_pending(c, MAX_RUNNING + 4)
        await resume(c)
        await wait_until(c, lambda s: s["num_waiting_reqs"] == 4, "a full queue")
        # Whatever order these three arrive in, 49 and 48 never beat the worst queued request
        # and 42 always does.
        newcomers = {
            p: asyncio.create_task(c.post("/generate", json=body([301, p], 8, priority=p)))
            for p in (49, 48, 42)
        }
        for p in (49, 48):
            r = await newcomers[p]
            assert r.status_code == 503, r.text
            assert "queue is full" in r.json()["error"]["message"]
        evicted = await queued.pop(48)
        assert evicted.status_code == 503, evicted.text
        assert "higher priority" in evicted.json()["error"]["message"]
        for t in [*queued.values(), newcomers[42], *lows]:
            assert finish_type(await json_of(t)) == "length"
        assert (await wait_idle(c))["kv_pool"]["used"] == 0


async def test_low_values_first_flips_the_order(low_first):
    """With smaller values first, priority 0 preempts requests of priority 50."""
    await check_preemption(low_first, low=50, high=0)


@pytest.fixture(scope="module")
def tight_kv(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("prio-kv"),
        "--enable-priority-scheduling",
        "--max-total-tokens",
        "300",
        "--decode-reserve-ratio",
        "0.05",
        "--chunked-prefill-size",
        "32",
    ) as s:
        yield s


async def test_kv_pressure_retracts_the_lowest_priority_first(tight_kv):
    """Eight requests of 70 tokens admitted on a reserve of 5 % outgrow a pool of 300: the
    retractions hit priority 0 (priorities 0 and 5 are within the preemption threshold, so only
    KV pressure retracts), and every request still ends with its greedy output alone."""
    prompts = [[100 + i, 7, 8, 9, 10, 11, 12, 13, 14, 15] for i in range(8)]
    priorities = [0, 5] * 4
    async with tight_kv.async_client() as c:
        alone = [
            (await json_of(c.post("/generate", json=body(p, 60))))["output_ids"] for p in prompts
        ]
        tasks = await saturate(
            c, [body(p, 60, priority=q) for p, q in zip(prompts, priorities, strict=True)]
        )
        await resume(c)
        outs = [await json_of(t) for t in tasks]
        assert (await wait_idle(c))["kv_pool"]["used"] == 0
    retracted = [q for o, q in zip(outs, priorities, strict=True) if meta(o)["num_retractions"]]
    assert retracted, "the pool was meant to run short"
    assert set(retracted) == {0}
    assert [o["output_ids"] for o in outs] == alone
