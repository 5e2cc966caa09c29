"""Control deadlines on a live node: a frame captured so long ago that its deadline has passed
never runs, and the client, the request counters and the deadline-miss counter agree; a
`deadline_ms` without `capture_time` counts from the moment the node received the request
(the main process stamps it before any pause wait), not from when the scheduler got it.

The scheduling rules (hopeless requests ended early under overload, waiting or running; one
that can make its deadline left alone; latest frame wins, even with a full queue) are unit
tests on the scheduling core: tests/unit/scheduler/test_sched_deadlines.py.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support.async_node import (
    body,
    finish_type,
    json_of,
    meta,
    metric,
    pause,
    resume,
    wait_idle,
    wait_pending,
)
from tests.support.server import run_server

NEW = 200


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("deadlines"),
        "--max-running-requests",
        "4",
        "--max-total-tokens",
        "4096",
    ) as s:
        yield s


def prompt(i: int) -> list[int]:
    return [20 + i % 50, 31, 47, 52 + i // 50, 60]


async def per_token_seconds(c: httpx.AsyncClient) -> float:
    """All-in time per token of a full wave (4 requests of NEW tokens side by side): e2e
    latency over NEW, the slowest of the wave. A first wave warms the node up (first calls of
    a fresh node are slower, which would overstate the time)."""

    async def wave(first: int) -> float:
        outs = await asyncio.gather(
            *(json_of(c.post("/generate", json=body(prompt(first + i), NEW))) for i in range(4))
        )
        return max(meta(o)["e2e_latency"] for o in outs) / NEW

    await wave(1000)
    return await wave(1004)


async def test_capture_time_already_past_its_deadline_never_runs(node):
    async with node.async_client() as c:
        before = await metric(c, "vla_requests_total", finish="deadline", priority="0")
        misses_before = await metric(c, "vla_deadline_misses_total", priority="0")
        req = body(prompt(7), NEW, capture_time=time.time() - 60, deadline_ms=100)
        out = await json_of(c.post("/generate", json=req))
        after = await metric(c, "vla_requests_total", finish="deadline", priority="0")
        misses = await metric(c, "vla_deadline_misses_total", priority="0") - misses_before
        idle = await wait_idle(c)
    assert finish_type(out) == "deadline"
    assert "missed" in meta(out)["finish_reason"]["message"]
    assert meta(out)["completion_tokens"] == 0
    assert meta(out)["queue_steps"] is None, "it was never part of a forward"
    assert after - before == 1 and misses == 1
    assert idle["kv_pool"]["used"] == 0


async def test_the_deadline_counts_from_receipt_not_from_the_end_of_a_pause(node):
    """deadline_ms without capture_time starts when the node receives the request: held by a
    pause past it, the request ends with `deadline` on resume instead of running (given after
    the pause, the same deadline would be 3x what the request needs)."""
    async with node.async_client() as c:
        deadline_s = 3 * NEW * await per_token_seconds(c)
        await pause(c, "in_place")
        task = asyncio.create_task(
            c.post("/generate", json=body(prompt(11), NEW, deadline_ms=deadline_s * 1e3))
        )
        await wait_pending(c, 1)
        await asyncio.sleep(1.5 * deadline_s)  # the deadline passes while the node is paused
        await resume(c)
        out = await json_of(task)
    assert finish_type(out) == "deadline"
    assert meta(out)["completion_tokens"] == 0
