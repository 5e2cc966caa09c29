"""Streaming clients that time every chunk as it arrives."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class StreamTiming:
    ttft: float
    itls: list[float] = field(default_factory=list)  # gap between chunks / tokens in the chunk
    e2e: float = 0.0
    tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    actions_at: list[float] = field(default_factory=list)  # time of each chunk carrying actions
    last: dict[str, Any] | None = None


def token_intervals(arrivals: list[tuple[float, int]]) -> list[float]:
    """Seconds per token between consecutive chunks of one stream, given (time, n_tokens).

    The first chunk (the prefill's token) only starts the clock: its gap is the TTFT. A chunk
    that carries n tokens (the stream may coalesce) counts as n intervals of gap / n."""
    out: list[float] = []
    for (t0, _), (t1, n) in zip(arrivals, arrivals[1:], strict=False):
        out += [(t1 - t0) / n] * n
    return out


async def timed_stream(client: httpx.AsyncClient, body: dict[str, Any]) -> StreamTiming:
    """Times one `/generate` stream; its chunks carry the ids so far (the node's default, as
    SGLang's), so a chunk's new tokens are the growth of `output_ids`."""
    t0 = time.perf_counter()
    arrivals: list[tuple[float, int]] = []  # (time, tokens) of each chunk that carries tokens
    timing = StreamTiming(ttft=float("nan"))
    async with client.stream("POST", "/generate", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode()[:500]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            n = len(chunk["output_ids"]) - timing.tokens
            if n:
                arrivals.append((now, n))
            if chunk.get("actions"):
                timing.actions_at.append(now - t0)
            timing.tokens += n
            timing.output_ids = chunk["output_ids"]
            timing.last = chunk
    timing.e2e = time.perf_counter() - t0
    if arrivals:
        timing.ttft = arrivals[0][0] - t0
    timing.itls = token_intervals(arrivals)
    return timing


async def concurrent_streams(
    url: str, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> list[StreamTiming]:
    limits = httpx.Limits(max_connections=len(bodies) + 4)
    async with httpx.AsyncClient(
        base_url=url, timeout=600, limits=limits, headers=headers
    ) as client:
        return await asyncio.gather(*(timed_stream(client, b) for b in bodies))
