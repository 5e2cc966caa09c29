"""The priority benchmark's low-priority robots: each streams one request after another until
told to stop, in the benchmark's process or in a client process of their own."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from vla_server.bench.priority_workloads import request_body
from vla_server.bench.stream_client import StreamTiming, timed_stream

LOW_SEED = 10_000  # robot i of phase seed s draws its prompts from LOW_SEED * (s + i + 1) + k


@dataclass(frozen=True)
class LowSpec:
    n: int
    tokens: int
    priority: int
    seed: int


def low_seed(spec: LowSpec, robot: int, k: int) -> int:
    """The seed of robot `robot`'s `k`-th prompt: the same in every case of a phase seed, so a
    prompt's outputs can be compared across cases."""
    return LOW_SEED * (spec.seed + robot + 1) + k


async def low_robot(
    client: httpx.AsyncClient,
    spec: LowSpec,
    robot: int,
    prompt: Callable[[int], dict[str, Any]],
    stop: Callable[[], bool],
) -> list[tuple[int, StreamTiming]]:
    out: list[tuple[int, StreamTiming]] = []
    while not stop():
        seed = low_seed(spec, robot, len(out))
        body = request_body(prompt(seed), spec.tokens, spec.priority)
        out.append((seed, await timed_stream(client, body)))
    return out


async def run_lows(
    url: str,
    spec: LowSpec,
    prompt: Callable[[int], dict[str, Any]],
    stop: Callable[[], bool],
) -> list[tuple[int, StreamTiming]]:
    limits = httpx.Limits(max_connections=spec.n + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        robots = [low_robot(client, spec, i, prompt, stop) for i in range(spec.n)]
        return [t for ts in await asyncio.gather(*robots) for t in ts]


class LowRobotsProcess:
    """The low robots in a client process of their own: their HTTP parsing and JSON decoding
    compete with the node for the cores, not with the action robot's client."""

    def __init__(self, url: str, spec: LowSpec, prompt: Callable[[int], dict[str, Any]]):
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.started = ctx.Event()
        self.parent, self.child = ctx.Pipe(duplex=False)
        self.cpu_s = 0.0  # the client process's CPU seconds, once finished
        args = (url, spec, prompt, self.stop, self.started, self.child)
        self.proc = ctx.Process(target=_child, args=args, daemon=True)

    def __enter__(self) -> LowRobotsProcess:
        self.proc.start()
        self.child.close()  # the child's end: its exit then ends a wait on the pipe
        if not self.started.wait(60):
            raise RuntimeError("the low robots' client process did not start")
        return self

    def finish(self) -> list[tuple[int, StreamTiming]]:
        self.stop.set()
        try:
            result, self.cpu_s = self.parent.recv()
        except EOFError:
            result = "it exited without a result"
        self.proc.join(30)
        if isinstance(result, str):
            raise RuntimeError(f"the low robots' client process failed: {result}")
        return result

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


def _child(url: str, spec: LowSpec, prompt: Any, stop: Any, started: Any, pipe: Any) -> None:
    # Polled between requests: no thread of this process waits on `stop`, since a waiter that
    # exits (this process failing) would leave the parent's `stop.set()` waiting for it.
    started.set()
    try:
        result: Any = asyncio.run(run_lows(url, spec, prompt, stop.is_set))
    except BaseException:  # the parent reports it (as text: not every exception pickles)
        result = traceback.format_exc()
    times = os.times()
    pipe.send((result, times.user + times.system))
