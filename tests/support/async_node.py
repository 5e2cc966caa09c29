"""Async helpers for tests against a live node: request bodies, polling the node's internal
state, and reading Prometheus counters with prometheus_client's own text parser."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from tests.support.server import metric_sum

POLL_TIMEOUT_S = 120.0  # generous: a loaded 2-core box may be slow, the tests never time steps


def greedy(n: int) -> dict[str, Any]:
    return {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}


def body(ids: list[int], n: int, **extra: Any) -> dict[str, Any]:
    return {"input_ids": ids, "sampling_params": greedy(n), **extra}


async def internal(c: httpx.AsyncClient) -> dict[str, Any]:
    r = await c.get("/get_server_info")
    r.raise_for_status()
    return r.json()["internal_states"][0]


async def wait_until(
    c: httpx.AsyncClient, pred: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """Poll the scheduler's internal state until `pred` holds; return that state."""
    end = time.monotonic() + POLL_TIMEOUT_S
    while True:
        state = await internal(c)
        if pred(state):
            return state
        assert time.monotonic() < end, f"timed out waiting for {what}: {state}"
        await asyncio.sleep(0.005)


async def wait_idle(c: httpx.AsyncClient) -> dict[str, Any]:
    return await wait_until(
        c, lambda s: s["num_running_reqs"] == 0 and s["num_waiting_reqs"] == 0, "an idle node"
    )


async def metric(c: httpx.AsyncClient, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels` (0 when none)."""
    return metric_sum((await c.get("/metrics")).text, name, **labels)


async def json_of(task: Awaitable[httpx.Response]) -> dict[str, Any]:
    r = await task
    assert r.status_code == 200, r.text
    return r.json()


def meta(out: dict[str, Any]) -> dict[str, Any]:
    return out["meta_info"]


def finish_type(out: dict[str, Any]) -> str:
    return meta(out)["finish_reason"]["type"]


async def pause(c: httpx.AsyncClient, mode: str) -> None:
    r = await c.post("/pause_generation", json={"mode": mode})
    assert r.status_code == 200 and r.json()["success"], r.text


async def resume(c: httpx.AsyncClient) -> None:
    r = await c.post("/continue_generation")
    assert r.status_code == 200 and r.json()["success"], r.text


async def wait_pending(c: httpx.AsyncClient, n: int) -> None:
    """Until the main process holds `n` requests (dispatched or held back by a pause)."""
    end = time.monotonic() + POLL_TIMEOUT_S
    while (await c.get("/get_server_info")).json()["num_pending_requests"] != n:
        assert time.monotonic() < end, f"timed out waiting for {n} pending requests"
        await asyncio.sleep(0.005)


async def stream_until_done(
    c: httpx.AsyncClient, req: dict[str, Any], started: asyncio.Event
) -> dict[str, Any]:
    """Stream `req`; `started` is set at its first token. Returns the last chunk (its
    `output_ids` are all the ids streamed)."""
    last: dict[str, Any] = {}
    async with c.stream("POST", "/generate", json={**req, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                last = json.loads(line.removeprefix("data: "))
                started.set()
    return last


async def outputs_alone(c: httpx.AsyncClient, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Each prompt's greedy output ids, run one at a time (the reference for a test that runs
    them alongside others)."""
    return [
        (await json_of(c.post("/generate", json=body(ids, n))))["output_ids"] for ids in prompts
    ]
