"""A high-priority robot's TTFT and ITL alone vs with N low-priority robots streaming.

`--workload` picks who the robots are (`priority_workloads.py`): `image` (the demo VLA, token-id
prompts, the low robots in this process, `--max-running-requests N` so the action robot must
preempt) or `text` (a 45M text-only Llama, text prompts, a 10 Hz loop at priority 10 beside 8
priority-0 robots streaming from a separate client process).

Two servers, both `--enable-priority-scheduling`: "plain", and "realtime" with
`--realtime-priority`, `--max-hold-ms` and `--realtime-reserve-ms` (priority isolation). Cases,
each round in this order: the action robot alone; the low robots alone (their throughput
without it); on the plain server, the action robot at its priority and at the low robots'
priority (FIFO, what priority buys); on the realtime server, at its priority (what isolation
buys). Greedy outputs are compared by prompt: the action robot's with its alone run, the low
robots' with the low-robots-alone case and, for their first `--alone-checks` prompts, with
each prompt served alone. The raw decode step at batch 1 and N (in-process, in turns with the
served rounds) shows what batching alone costs the ITL, and the decode step beside a process
decoding N rows (`lane_floor.py`) what two lanes computing at once cost each other here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any

import httpx

from vla_server.bench import lane_floor
from vla_server.bench.cpu_accounting import cores_by_process, cpu_snapshot
from vla_server.bench.low_robots import LOW_SEED, LowRobotsProcess, LowSpec, run_lows
from vla_server.bench.priority_report import Phase, report
from vla_server.bench.priority_workloads import LOW, WORKLOADS, Prompts, Workload, request_body
from vla_server.bench.raw_step import measure_decode_steps
from vla_server.bench.scheduler_common import add_common_args, serve, setup
from vla_server.bench.stream_client import StreamTiming, timed_stream

_OVERRIDES = {  # option -> Workload field it overrides
    "low_tokens": "low_tokens",
    "action_tokens": "high_tokens",
    "reps": "reps",
    "warmup_frames": "warmup",
    "rounds": "rounds",
    "realtime_priority": "realtime_priority",
    "max_hold_ms": "max_hold_ms",
    "reserve_ms": "reserve_ms",
}


def add_args(p: argparse.ArgumentParser) -> None:
    add_common_args(p)
    p.set_defaults(model=None)  # the workload's
    p.add_argument("--workload", choices=list(WORKLOADS), default="image")
    p.add_argument("--low-robots", type=int, default=8)
    p.add_argument("--gap", type=float, default=0.1, help="the action robot's loop period, s")
    p.add_argument("--settle", type=float, default=2.0, help="seconds for the low robots to start")
    p.add_argument(
        "--alone-checks",
        type=int,
        default=2,
        help="each low robot's first prompts of the isolation case served again alone, to "
        "compare their greedy outputs",
    )
    p.add_argument(
        "--skip-plain", action="store_true", help="only the realtime server's cases (quicker)"
    )
    for option in _OVERRIDES:
        p.add_argument(f"--{option.replace('_', '-')}", type=float, default=None)


def workload(args: argparse.Namespace) -> Workload:
    """The chosen workload with the options given on the command line on top."""
    wl = WORKLOADS[args.workload]
    changed = {
        field: type(getattr(wl, field))(getattr(args, option))
        for option, field in _OVERRIDES.items()
        if getattr(args, option) is not None
    }
    return dataclasses.replace(wl, **changed)


@dataclass(frozen=True)
class Case:
    server: str  # "plain" or "realtime"
    lows: bool
    high_priority: int | None  # None: no action robot


def cases(wl: Workload, n: int) -> dict[str, Case]:
    p = wl.high_priority
    return {
        "alone": Case("realtime", False, p),
        f"{n} low robots alone": Case("realtime", True, None),
        f"{n} low robots, priority {p}": Case("plain", True, p),
        f"{n} low robots, equal priority (FIFO)": Case("plain", True, LOW),
        f"{n} low robots, priority {p}, realtime isolation": Case("realtime", True, p),
    }


async def action_robot(
    client: httpx.AsyncClient, wl: Workload, prompts: Prompts, gap: float, priority: int, seed: int
) -> list[tuple[int, StreamTiming]]:
    """The robot's control loop: a request every `gap` seconds, on the clock (as a camera at a
    fixed rate sends its frames); the first `warmup` are its loop starting up, not measured."""
    out = []
    start = time.perf_counter()
    for i in range(wl.warmup + wl.reps):
        await asyncio.sleep(max(0.0, start + i * gap - time.perf_counter()))
        frame_seed = seed * 1000 + i  # a new observation each time
        body = request_body(prompts.high(wl.high_prompt, frame_seed), wl.high_tokens, priority)
        timing = await timed_stream(client, body)
        if i >= wl.warmup:
            out.append((frame_seed, timing))
    return out


async def phase(url: str, args: argparse.Namespace, case: Case, seed: int, seconds: float) -> Phase:
    """One case's run: the low robots start, settle, then the action robot's loop runs (or,
    without one, `seconds` pass)."""
    wl, prompts = args.wl, args.prompts
    spec = LowSpec(args.low_robots if case.lows else 0, wl.low_tokens, LOW, seed)
    low_prompt = functools.partial(prompts.body_prompt, wl.low_prompt)  # pickles (spawn)

    async def high() -> list[tuple[int, StreamTiming]]:
        if spec.n:
            await asyncio.sleep(args.settle)
        if case.high_priority is None:
            await asyncio.sleep(seconds)
            return []
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            return await action_robot(client, wl, prompts, args.gap, case.high_priority, seed)

    t0 = time.perf_counter()
    if not spec.n:
        return Phase(await high(), [], time.perf_counter() - t0, 0.0)
    if wl.lows_in_process:
        stop = asyncio.Event()
        lows = asyncio.create_task(run_lows(url, spec, low_prompt, stop.is_set))
        h = await high()
        stop.set()
        return Phase(h, await lows, time.perf_counter() - t0, 0.0)
    with LowRobotsProcess(url, spec, low_prompt) as proc:
        t0 = time.perf_counter()
        h = await high()
        lows_out = await asyncio.to_thread(proc.finish)
        return Phase(h, lows_out, time.perf_counter() - t0, proc.cpu_s)


async def served_alone(url: str, bodies: list[dict[str, Any]]) -> list[list[int]]:
    """Each body served with nothing else running: the reference greedy outputs."""
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        for body in bodies:
            out.append((await timed_stream(client, body)).output_ids)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    wl = args.wl = workload(args)
    args.model = args.model or wl.model
    bench = setup(args)
    args.prompts = Prompts(wl, bench.path)
    n = args.low_robots
    raw: dict[int, list[float]] = {1: [], n: []}
    plan = cases(wl, n)
    if args.skip_plain:
        plan = {name: case for name, case in plan.items() if case.server == "realtime"}
    phases: dict[str, list[Phase]] = {c: [] for c in plan}
    cpu: dict[str, list[dict[str, float]]] = {c: [] for c in plan}
    flags = ["--enable-priority-scheduling"]
    flags += ["--max-running-requests", str(n)] if wl.cap_running else []
    realtime = ["--realtime-priority", str(wl.realtime_priority)]
    realtime += ["--max-hold-ms", str(wl.max_hold_ms), "--realtime-reserve-ms", str(wl.reserve_ms)]
    print(f"workload {wl.name}: {wl}", flush=True)
    with contextlib.ExitStack() as stack:
        servers = {
            "plain": stack.enter_context(serve(bench, *flags)),
            "realtime": stack.enter_context(serve(bench, *flags, *realtime)),
        }
        warm = plan[list(plan)[-1]]
        for name, node in servers.items():
            asyncio.run(phase(node.url, args, dataclasses.replace(warm, server=name), 99, 0))
        for r in range(wl.rounds):
            print(f"  round {r + 1}/{wl.rounds}: raw decode step", flush=True)
            for b in raw:
                raw[b] += measure_decode_steps(bench.path, b, 50)
            seconds = 0.0
            for name, case in plan.items():
                print(f"  round {r + 1}/{wl.rounds}: {name}", flush=True)
                node = servers[case.server]
                flush_cache(node.url)  # an earlier case's prompts must not be cached hits
                before, t0 = cpu_snapshot(node), time.perf_counter()
                ph = asyncio.run(phase(node.url, args, case, r, seconds))
                seconds = seconds or ph.seconds  # the low robots alone run as long as alone
                wall = time.perf_counter() - t0
                cores = cores_by_process(before, cpu_snapshot(node), wall)
                cpu[name].append(cores | {"low robots client": ph.low_cpu_s / wall})
                phases[name].append(ph)
        floor = lane_floor.measure(bench.path, n, 100, bench.threads)
        iso_case = list(plan)[-1]
        checks = alone_checks(phases[iso_case], args)
        refs = asyncio.run(served_alone(servers["realtime"].url, [b for _, b in checks]))
        node_state = httpx.get(f"{servers['realtime'].url}/get_server_info").json()
    alone_refs = {seed: ids for (seed, _), ids in zip(checks, refs, strict=True)}
    return report(bench, args, raw, phases, cpu, alone_refs, node_state | {"lane_floor": floor})


def flush_cache(url: str) -> None:
    """Empty the node's prefix cache; it refuses while requests still finish, so ask until it
    agrees (the previous case's streams have all ended by then)."""
    for _ in range(600):
        if httpx.post(f"{url}/flush_cache").status_code == 200:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url} kept refusing /flush_cache")


def alone_checks(phases: list[Phase], args: argparse.Namespace) -> list[tuple[int, dict[str, Any]]]:
    """(seed, body) of the low prompts to serve again alone: each robot's first few."""
    wl, seen = args.wl, set()
    for ph in phases:
        seen |= {seed for seed, _ in ph.low}
    firsts = sorted(seen)
    chosen = [s for s in firsts if s % LOW_SEED < args.alone_checks]
    return [
        (s, request_body(args.prompts.body_prompt(wl.low_prompt, s), wl.low_tokens, LOW))
        for s in chosen
    ]
