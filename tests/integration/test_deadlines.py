"""Control deadlines and latest-frame-wins on a live node with `--max-running-requests 4`.

Deadlines are set from the per-token time measured in the same test (never from absolute
numbers): a request that cannot make its deadline must end with finish reason `deadline`
before it would have produced its tokens, without holding KV; a frame captured so long ago that
its deadline has passed never runs; newer frames of a session supersede its older waiting ones;
the Prometheus counters agree with what the clients saw.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.integration.sched_helpers import (
    body,
    finish_type,
    json_of,
    meta,
    metric,
    pause,
    resume,
    saturate,
    wait_idle,
    wait_pending,
    wait_until,
)
from tests.server_process import run_server

MAX_RUNNING = 4
NEW = 200
OVERLOAD = 24  # six waves of four


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("deadlines"),
        "--max-running-requests",
        str(MAX_RUNNING),
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


async def test_overload_ends_hopeless_requests_early_and_frees_kv(node):
    async with node.async_client() as c:
        misses_before = await metric(c, "vla_deadline_misses_total", priority="0")
        p = await per_token_seconds(c)
        # One wave fits in the deadline; the later waves would need 2x to 6x of it. One
        # capture time for all: the node receives 24 requests over some milliseconds, and a
        # deadline counted from each receipt would give the later ones more time.
        deadline_s = 1.5 * NEW * p
        frame = {"capture_time": time.time(), "deadline_ms": deadline_s * 1e3}
        outs = await asyncio.gather(
            *(
                json_of(c.post("/generate", json=body(prompt(i), NEW, **frame)))
                for i in range(OVERLOAD)
            )
        )
        idle = await wait_idle(c)
        misses = await metric(c, "vla_deadline_misses_total", priority="0") - misses_before
    ended = [o for o in outs if finish_type(o) == "deadline"]
    assert all(finish_type(o) in ("deadline", "length") for o in outs)
    # At most one wave can make it; all the others must be ended.
    assert len(ended) >= OVERLOAD - MAX_RUNNING
    assert all(meta(o)["completion_tokens"] < NEW for o in ended)
    assert all("deadline" in meta(o)["finish_reason"]["message"] for o in ended)
    # Those ended while waiting never took KV: they were never part of a forward.
    never_ran = [o for o in ended if meta(o)["queue_steps"] is None]
    assert len(never_ran) >= OVERLOAD - 2 * MAX_RUNNING
    assert all(meta(o)["completion_tokens"] == 0 for o in never_ran)
    # Those that never ran were dropped once it was clear they could not make it, not left to
    # wait until their deadline had passed.
    assert max(meta(o)["e2e_latency"] for o in never_ran) < deadline_s
    assert idle["kv_pool"]["used"] == 0
    assert misses == len(ended)


async def test_capture_time_already_past_its_deadline_never_runs(node):
    async with node.async_client() as c:
        before = await metric(c, "vla_requests_total", finish="deadline", priority="0")
        req = body(prompt(7), NEW, capture_time=time.time() - 60, deadline_ms=100)
        out = await json_of(c.post("/generate", json=req))
        after = await metric(c, "vla_requests_total", finish="deadline", priority="0")
        idle = await wait_idle(c)
    assert finish_type(out) == "deadline"
    assert "missed" in meta(out)["finish_reason"]["message"]
    assert meta(out)["completion_tokens"] == 0
    assert meta(out)["queue_steps"] is None, "it was never part of a forward"
    assert after - before == 1
    assert idle["kv_pool"]["used"] == 0


async def test_a_request_that_can_make_its_deadline_is_not_ended(node):
    """On a quiet node a deadline 3x the measured time leaves the request alone."""
    async with node.async_client() as c:
        p = await per_token_seconds(c)
        out = await json_of(
            c.post("/generate", json=body(prompt(3), NEW, deadline_ms=3 * NEW * p * 1e3))
        )
    assert finish_type(out) == "length"
    assert meta(out)["completion_tokens"] == NEW


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


async def test_newer_frames_supersede_older_waiting_ones(node):
    """While the node is busy, each new frame of session `cam` cancels the waiting older one;
    the newest runs; another session's frame is left alone."""
    async with node.async_client() as c:
        before = await metric(c, "vla_requests_total", finish="superseded", priority="0")
        busy = await saturate(c, [body(prompt(100 + i), 440) for i in range(MAX_RUNNING)])
        await resume(c)

        def frame(k: int, session: str = "cam") -> asyncio.Task:
            req = body([400 + k, 401, 402], 8, session_id=session, supersede=True)
            return asyncio.create_task(c.post("/generate", json=req))

        other = frame(0, "other-cam")
        await wait_until(c, lambda s: s["num_waiting_reqs"] == 1, "the other session's frame")
        frames = [frame(1)]
        await wait_until(c, lambda s: s["num_waiting_reqs"] == 2, "the first frame")
        for k in range(2, 6):
            frames.append(frame(k))
            # the previous frame ends as soon as this one arrives
            assert finish_type(await json_of(frames[-2])) == "superseded"
        state = await wait_until(c, lambda s: s["num_waiting_reqs"] == 2, "the newest frame")
        assert state["num_running_reqs"] == MAX_RUNNING, "the busy requests ended too soon"
        newest = await json_of(frames[-1])
        other_out = await json_of(other)
        for t in busy:
            await json_of(t)
        after = await metric(c, "vla_requests_total", finish="superseded", priority="0")
        idle = await wait_idle(c)
    superseded = [await json_of(t) for t in frames[:-1]]
    assert all(meta(o)["completion_tokens"] == 0 for o in superseded)
    assert all(meta(o)["finish_reason"]["message"] for o in superseded)
    assert finish_type(newest) == "length" and finish_type(other_out) == "length"
    assert after - before == len(superseded) == 4
    assert idle["kv_pool"]["used"] == 0


@pytest.fixture(scope="module")
def bounded(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("deadlines-bounded"),
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "1",
    ) as s:
        yield s


async def test_a_newer_frame_supersedes_even_when_the_queue_is_full(bounded):
    async with bounded.async_client() as c:
        (busy,) = await saturate(c, [body(prompt(0), 440)])
        await resume(c)
        old = asyncio.create_task(
            c.post("/generate", json=body([400, 1], 8, session_id="cam", supersede=True))
        )
        await wait_until(c, lambda s: s["num_waiting_reqs"] == 1, "the old frame queued")
        new = asyncio.create_task(
            c.post("/generate", json=body([400, 2], 8, session_id="cam", supersede=True))
        )
        old_r, new_r = await old, await new
        await busy
    assert old_r.status_code == 200 and finish_type(old_r.json()) == "superseded"
    assert new_r.status_code == 200, new_r.text
