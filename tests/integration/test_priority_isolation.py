"""Priority isolation through a live node (`--realtime-priority 100`): low-priority streams
are held while a realtime neighbour runs, yet none starves, and holding changes no token.

`--realtime-tolerance 0` makes the isolation strict (others join a protected step only when
forced after `--max-hold-ms`), so that lows are held whatever this machine's step times are.
While the lows stream, realtime requests follow one another back to back until every low has
ended: the lows must still finish, with the greedy outputs they have alone. The held-step counts
of the internal state and of Prometheus agree, and the realtime requests' latencies land in the
histograms of their own priority. With `--realtime-reserve-ms`, the realtime requests' arrival
rhythm is learned (its period is in the internal state) and the window around the next one is
kept clear as well, which holds the lows more and changes no token either.

With the background lane (`--realtime-background-lane on`), the held lows run in a second model
lane meanwhile: they finish, with the outputs they have alone, and the node counts the lane's
steps, the longest gap between a low's steps and the main process's deferred outputs.

The rules themselves (the hold bound, the step-time model, the lane) are unit tests on the
scheduling core: tests/unit/scheduler/test_sched_isolation.py and test_sched_background_lane.py;
the order in which the detokenizer and the main process serve streams:
tests/unit/frontend/test_stream_order.py.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import psutil
import pytest

from tests.support.async_node import (
    POLL_TIMEOUT_S,
    body,
    finish_type,
    internal,
    json_of,
    metric,
    outputs_alone,
    stream_until_done,
    wait_idle,
)
from tests.support.server import run_server

LOW_NEW = 96
LOWS = [[20 + i, 31, 47, 52 + i, 60] for i in range(3)]
HIGH_NEW = 8
REALTIME = 100


def high_prompt(i: int) -> list[int]:
    return [200 + i % 40, 201, 7, 9]


# Strict isolation (others join a protected step only when forced) on a small KV pool.
STRICT = ("--enable-priority-scheduling", "--realtime-priority", str(REALTIME))
STRICT += ("--realtime-tolerance", "0", "--max-total-tokens", "4096")


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    # the max-hold rule itself; the lane has its own node below
    flags = ("--max-hold-ms", "50", "--realtime-reserve-ms", "5", "--realtime-background-lane")
    with run_server(llama_path, tmp_path_factory.mktemp("isolation"), *STRICT, *flags, "off") as s:
        yield s


@pytest.fixture(scope="module")
def lane_node(llama_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("isolation-lane")
    with run_server(llama_path, folder, *STRICT, "--realtime-background-lane", "on") as s:
        yield s


async def realtime_until(c: httpx.AsyncClient, done: asyncio.Future) -> list[dict]:
    """Realtime requests back to back until `done`; their replies."""
    outs: list[dict] = []
    while not done.done():
        req = body(high_prompt(len(outs)), HIGH_NEW, priority=REALTIME)
        outs.append(await json_of(c.post("/generate", json=req)))
    return outs


async def lows_beside_realtime(c: httpx.AsyncClient) -> tuple[list[dict], list[dict]]:
    """The lows stream while realtime requests follow one another until every low has ended;
    (the lows' final outputs, the realtime replies)."""
    started = [asyncio.Event() for _ in LOWS]
    lows = asyncio.gather(
        *(
            stream_until_done(c, body(ids, LOW_NEW), ev)
            for ids, ev in zip(LOWS, started, strict=True)
        )
    )
    # a liveness bound, not a latency threshold
    await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in started)), POLL_TIMEOUT_S)
    highs = await asyncio.wait_for(realtime_until(c, lows), POLL_TIMEOUT_S)
    return await lows, highs


async def realtime_alone(c: httpx.AsyncClient, n: int) -> list[list[int]]:
    """The first `n` realtime prompts' outputs, each served alone."""
    outs = [
        await json_of(c.post("/generate", json=body(high_prompt(i), HIGH_NEW))) for i in range(n)
    ]
    return [o["output_ids"] for o in outs]


def assert_as_alone(
    outs: list[dict], alone: list[list[int]], highs: list[dict], high_alone
) -> None:
    """Every low ended, as it does alone; so did every realtime request."""
    assert [o["output_ids"] for o in outs] == alone
    assert all(finish_type(o) == "length" for o in outs)
    assert [h["output_ids"] for h in highs] == high_alone


async def test_isolation_holds_lows_none_starves_outputs_unchanged(node):
    async with node.async_client() as c:
        alone = await outputs_alone(c, LOWS, LOW_NEW)
        before = await internal(c)
        outs, highs = await lows_beside_realtime(c)
        after = await wait_idle(c)
        counter = await metric(c, "vla_held_steps_total")
        ttfts = await metric(c, "vla_time_to_first_token_seconds_count", priority=str(REALTIME))
        high_alone = await realtime_alone(c, len(highs))
    assert after["held_steps"] > before["held_steps"]
    # Strict holding gives each low at most one step per hold, so many realtime requests run
    # meanwhile: enough arrivals for a period.
    assert len(highs) >= 4 and after["realtime_period_ms"] > 0
    assert counter == after["held_steps"]
    assert ttfts == len(highs)
    assert_as_alone(outs, alone, highs, high_alone)
    assert after["kv_pool"]["used"] == 0


async def test_background_lane_runs_the_held_lows_outputs_unchanged(lane_node):
    async with lane_node.async_client() as c:
        alone = await outputs_alone(c, LOWS, LOW_NEW)
        outs, highs = await lows_beside_realtime(c)
        after = await wait_idle(c)
        info = (await c.get("/get_server_info")).json()
        high_alone = await realtime_alone(c, len(highs))
    assert after["background_steps"] > 0
    assert after["max_unprotected_gap_ms"] > 0 and after["max_step_ms"] > 0
    order = info["stream_order"]
    assert set(order) == {"deferred_outputs", "max_output_defer_ms", "max_stream_gap_ms"}
    assert order["max_stream_gap_ms"] > 0  # the lows streamed many outputs each
    assert_as_alone(outs, alone, highs, high_alone)
    assert after["kv_pool"]["used"] == 0
    assert_placed(lane_node, info["scheduler_info"]["node_cpus"])


def assert_placed(server, node_cpus: list[int] | None) -> None:
    """With the lane, the front end and the detokenizer keep off the main lane's first core
    (cpu_placement.py); the scheduler's main lane worker alone may use it."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:  # no core to split: nothing placed
        assert node_cpus is None
        return
    assert node_cpus == allowed[1:]
    front = psutil.Process(server.proc.pid)
    by_name = {p.name(): p for p in front.children()}
    for proc in (front, by_name["vla-detokenizer"]):
        for thread in proc.threads():
            assert sorted(os.sched_getaffinity(thread.id)) == node_cpus, proc.name()
    sched = [sorted(os.sched_getaffinity(t.id)) for t in by_name["vla-scheduler"].threads()]
    assert allowed in sched  # the main lane's worker (and any OpenMP threads it started)
    assert all(cpus in (allowed, node_cpus) for cpus in sched)
    assert sched.count(node_cpus) >= 2  # the loop and the lane at least
