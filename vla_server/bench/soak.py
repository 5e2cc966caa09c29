"""Soak benchmark: robots and abusive clients on a demo node; lost requests, latency, memory.

For --minutes, against one demo node (`--send-timeout 5 --request-read-timeout 5`: short
client timeouts, so the connection guard cuts stalled clients many times a minute). R robots
each send a streamed action request per control tick (`--rate-hz`): a camera frame (cycling
`--frames` distinct JPEGs), `num_actions`, `unnorm_key` demo_arm. The run's phases:

1. warm-up (5 s), robots only, not compared;
2. unloaded (10 s), robots only;
3. slowloris (10 s), robots and 200 connections that trickle a partial request (reopened when
   the node closes them): the robots' P50 latency over the unloaded phase's is reported;
4. soak (the rest), robots and abusive traffic: bad inputs (must be 4xx), streams left after
   their first chunk, streams aborted by POST /abort_request, stalled readers (streams never
   read until the node cuts them off).

Every request must end with a result (a final chunk, an abort included) or a 4xx, or be one a
client left on purpose; anything else is `lost`. Reported: requests by client and class,
robots' P50/P99 per minute, the RSS of the node's processes (and the main process's open file
descriptors) per minute with their least-squares slope after the first minute (the caches
fill during it; the first half of a shorter run), and the node's pending requests and KV in
use once the traffic has stopped. JSON and PNG under --out.

    python -m vla_server.bench soak --minutes 30 --robots 4 [--rate-hz 10] [--out bench_out/soak]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from vla_harness.server_subprocess import ServerProcess, running_server
from vla_harness.stats import pct
from vla_server.bench import soak_traffic as traffic
from vla_server.bench.multimodal import DEFAULT_LAYOUT, camera_frames, request_body
from vla_server.bench.soak_report import report
from vla_server.bench.soak_stats import is_lost
from vla_server.policies.llava.demo import demo_model_path

WARMUP_S = 5.0
PHASE_S = 10.0
SLOWLORIS_CONNECTIONS = 200
CLIENT_TIMEOUT_S = 5
NODE_FLAGS = ("--send-timeout", str(CLIENT_TIMEOUT_S), "--request-read-timeout", "5")
SAMPLE_S = 5.0
PROGRESS_S = 2.0
DRAIN_S = 60.0
# Abusive clients in the soak phase: seconds between two of each.
ABUSE_PERIODS = {"bad_input": 0.5, "disconnect": 1.0, "abort": 1.0, "stalled_reader": 10.0}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--robots", type=int, default=4)
    p.add_argument("--rate-hz", type=float, default=10.0, help="each robot's control rate")
    p.add_argument("--num-actions", type=int, default=1, help="action vectors per request")
    p.add_argument("--frames", type=int, default=16, help="distinct camera frames per robot")
    p.add_argument("--out", type=Path, default=Path("bench_out/soak"))


class MemorySampler:
    """RSS (MB) of the node's processes and the main process's open descriptors over time."""

    def __init__(self, server: ServerProcess, rec: traffic.Recorder):
        main = psutil.Process(server.proc.pid)
        children = {p.name().removeprefix("vla-"): p for p in server.node_children()}
        self.procs = {"main": main, **children}
        self.rec = rec
        self.rss: dict[str, list[tuple[float, float]]] = {name: [] for name in self.procs}
        self.fds: list[tuple[float, float]] = []

    def sample(self) -> None:
        t = self.rec.elapsed()
        for name, proc in self.procs.items():
            self.rss[name].append((t, proc.memory_info().rss / 2**20))
        self.fds.append((t, float(self.procs["main"].num_fds())))

    def latest(self) -> dict[str, float]:
        return {name: s[-1][1] for name, s in self.rss.items() if s}

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_S)


async def _progress(rec: traffic.Recorder, mem: MemorySampler, total_s: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_S)
        now = rec.elapsed()
        recent = [
            o.latency
            for o in rec.outcomes
            if o.kind == "robot" and o.start > now - 10 and o.result == "ok"
        ]
        lost = sum(is_lost(o.result) for o in rec.outcomes)
        rss = " ".join(f"{k} {v:.0f}" for k, v in mem.latest().items())
        print(
            f"\r[{now:5.0f}/{total_s:.0f} s] {rec.phase:9s} requests {len(rec.outcomes)}, "
            f"lost {lost}, robot p50 (10 s) {pct(recent, 50) * 1e3:6.1f} ms, RSS MB {rss}   ",
            end="",
            flush=True,
        )


def _robot_bodies(robot: int, frames: int, num_actions: int) -> list[dict[str, Any]]:
    images = camera_frames(frames, 320, 240, 90, seed=robot)
    instructions = DEFAULT_LAYOUT.instructions
    instruction = instructions[robot % len(instructions)]
    return [request_body(f, instruction, "demo_arm", num_actions) for f in images]


class Abuse:
    """The soak phase's abusive clients, each kind started every ABUSE_PERIODS seconds."""

    def __init__(self, client: httpx.AsyncClient, server: ServerProcess, rec: traffic.Recorder):
        hold_s = 3.0 * CLIENT_TIMEOUT_S
        self.kinds = {
            "bad_input": lambda i: traffic.bad_input(client, rec, i),
            "disconnect": lambda i: traffic.disconnect(client, rec, i),
            "abort": lambda i: traffic.abort(client, rec, i),
            "stalled_reader": lambda i: traffic.stalled_reader(
                server.host, server.port, rec, hold_s
            ),
        }
        self.in_flight: set[asyncio.Task[None]] = set()

    async def spawn(self, kind: str, stop: asyncio.Event) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            task = asyncio.create_task(self.kinds[kind](i))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)
            await traffic.until_stopped(stop, ABUSE_PERIODS[kind])

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`, then until every started client has ended."""
        await asyncio.gather(*(self.spawn(kind, stop) for kind in self.kinds))
        await asyncio.gather(*list(self.in_flight))


async def _phases(
    server: ServerProcess,
    rec: traffic.Recorder,
    bodies: list[list[dict[str, Any]]],
    period: float,
    total_s: float,
) -> traffic.SlowlorisResult:
    """Robots throughout; the slowloris and the soak phase's abuse in their turn."""
    robots_done, abuse_done, slow_done = asyncio.Event(), asyncio.Event(), asyncio.Event()
    limits = httpx.Limits(max_connections=64)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=120) as robot_client,
        httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as abuse_client,
    ):
        robots = asyncio.gather(
            *(traffic.robot(robot_client, rec, b, period, robots_done) for b in bodies)
        )
        await asyncio.sleep(WARMUP_S)
        rec.phase = "unloaded"
        await asyncio.sleep(PHASE_S)
        rec.phase = "slowloris"
        slow = asyncio.create_task(
            traffic.slowloris(server.host, server.port, SLOWLORIS_CONNECTIONS, slow_done)
        )
        await asyncio.sleep(PHASE_S)
        slow_done.set()
        slowloris = await slow
        rec.phase = "soak"
        abuse = asyncio.create_task(Abuse(abuse_client, server, rec).run(abuse_done))
        await asyncio.sleep(max(total_s - rec.elapsed(), 0.0))
        robots_done.set()
        abuse_done.set()
        await asyncio.gather(robots, abuse)
    return slowloris


def _by_label(metrics: str, name: str, label: str) -> dict[str, float]:
    """A counter's value per value of `label`, summed over its other labels."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == name and label in s.labels:
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


async def _end_state(server: ServerProcess) -> dict[str, Any]:
    """The node once the traffic has stopped and its last requests drained (or a minute
    passed): requests pending and KV in use, and its own counts of what it finished and cut."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
        deadline = time.monotonic() + DRAIN_S
        while True:
            info = (await c.get("/get_server_info")).json()
            state = info["internal_states"][0]
            busy = info["num_pending_requests"] or state["num_running_reqs"]
            if not busy or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        metrics = (await c.get("/metrics")).text
    return {
        "num_pending_requests": info["num_pending_requests"],
        "num_running_reqs": state["num_running_reqs"],
        "num_waiting_reqs": state["num_waiting_reqs"],
        "kv_pool": info["kv_pool"],
        "finished_by_type": _by_label(metrics, "vla_requests_total", "finish"),
        "http_by_status": _by_label(metrics, "vla_http_requests_total", "status"),
        "slow_client_aborts": _by_label(metrics, "vla_slow_client_aborts_total", "phase"),
    }


async def _drive(
    server: ServerProcess, args: argparse.Namespace, bodies: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    rec = traffic.Recorder()
    mem = MemorySampler(server, rec)
    total_s = args.minutes * 60.0
    background = [
        asyncio.create_task(mem.run()),
        asyncio.create_task(_progress(rec, mem, total_s)),
    ]
    try:
        slowloris = await _phases(server, rec, bodies, 1.0 / args.rate_hz, total_s)
    finally:
        for task in background:
            task.cancel()
    print()
    end = await _end_state(server)
    mem.sample()
    return {"rec": rec, "mem": mem, "slowloris": slowloris, "end": end, "total_s": total_s}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.minutes * 60.0 < WARMUP_S + 2 * PHASE_S + PHASE_S:
        raise SystemExit(f"--minutes: at least {(WARMUP_S + 3 * PHASE_S) / 60:.2f}")
    print(f"{args.robots} robots at {args.rate_hz:g} Hz for {args.minutes:g} min on the demo VLA")
    bodies = [_robot_bodies(r, args.frames, args.num_actions) for r in range(args.robots)]
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "node.log"
    log_path.unlink(missing_ok=True)
    print(f"starting the node (log: {log_path}) ...", flush=True)
    with running_server(demo_model_path(), extra=NODE_FLAGS, log_path=log_path) as server:
        measured = asyncio.run(_drive(server, args, bodies))
    return report(args, **measured)
