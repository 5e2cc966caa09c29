"""A high-priority robot's TTFT and ITL alone vs with N low-priority robots streaming.

One server with `--enable-priority-scheduling` and `--max-running-requests N`, so the N
low-priority robots (each re-sending a long stream as soon as its last one ends) saturate it
and the high-priority robot's short action-like requests must preempt one of them. The same
robot sending at the low robots' priority (plain FIFO order) shows what priority buys. A second
server, the same plus `--realtime-priority` (priority isolation: the low robots are held out of
the high robot's steps where the step-time model says they would slow them, for at most
`--max-hold-ms`, and out of the window around its next expected request,
`--realtime-reserve-ms`), shows what isolation buys, and what it costs the low robots' throughput
(their tokens per second over the same phase, against the first server's priority case). The
raw decode step at batch 1 and N (in-process, in turns with the served rounds) shows what
batching alone costs the ITL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any

import httpx

from vla_harness.stats import summary_ms, table
from vla_server.bench.cpu_accounting import cores_by_process, cpu_snapshot
from vla_server.bench.raw_step import measure_decode_steps
from vla_server.bench.scheduler_common import (
    BenchSetup,
    add_common_args,
    gen_body,
    itls,
    latency_cols,
    prompt_ids,
    save_report,
    serve,
    setup,
    ttfts,
)
from vla_server.bench.stream_client import StreamTiming, timed_stream

LOW, HIGH = 0, 100  # more than --priority-scheduling-preemption-threshold (10) apart
INSTRUCTION = prompt_ids(24, seed=7)  # the action robot's fixed instruction prefix


def add_args(p: argparse.ArgumentParser) -> None:
    add_common_args(p)
    p.add_argument("--low-robots", type=int, default=8)
    p.add_argument("--low-tokens", type=int, default=48, help="new tokens per low-priority stream")
    p.add_argument("--action-tokens", type=int, default=7, help="new tokens per action request")
    p.add_argument("--reps", type=int, default=10, help="action requests per phase")
    p.add_argument("--gap", type=float, default=0.1, help="the action robot's loop period, s")
    p.add_argument(
        "--warmup-frames",
        type=int,
        default=5,
        help="action requests each phase starts with, not measured (the loop in steady state)",
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--settle", type=float, default=2.0, help="seconds for the low robots to start")
    p.add_argument(
        "--realtime-priority", type=int, default=HIGH, help="of the isolation case's server"
    )
    p.add_argument("--max-hold-ms", type=float, default=50.0, help="of the isolation case's server")
    p.add_argument(
        "--reserve-ms",
        type=float,
        default=10.0,
        help="the isolation case's --realtime-reserve-ms (the action robot is a steady loop)",
    )


async def action_robot(
    client: httpx.AsyncClient, args: argparse.Namespace, priority: int, seed: int
) -> list[StreamTiming]:
    """The robot's control loop: a request every `gap` seconds, on the clock (as a camera at a
    fixed rate sends its frames); the first `warmup_frames` are its loop starting up, not
    measured."""
    out = []
    start = time.perf_counter()
    for i in range(args.warmup_frames + args.reps):
        await asyncio.sleep(max(0.0, start + i * args.gap - time.perf_counter()))
        ids = INSTRUCTION + prompt_ids(8, seed=seed * 1000 + i)  # a new observation each time
        body = gen_body(ids, args.action_tokens, priority=priority)
        timing = await timed_stream(client, body)
        if i >= args.warmup_frames:
            out.append(timing)
    return out


async def low_robot(
    client: httpx.AsyncClient, tokens: int, seed: int, stop: asyncio.Event
) -> list[StreamTiming]:
    out = []
    while not stop.is_set():
        body = gen_body(prompt_ids(32, seed=seed + len(out)), tokens, priority=LOW)
        out.append(await timed_stream(client, body))
    return out


async def phase(
    url: str, args: argparse.Namespace, n_low: int, priority: int, seed: int
) -> tuple[list[StreamTiming], list[StreamTiming], float]:
    """The action robot's timings, the low robots' streams that ran meanwhile, and the seconds
    from the low robots' start to their end."""
    limits = httpx.Limits(max_connections=n_low + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        stop = asyncio.Event()
        t0 = time.perf_counter()
        lows = [
            asyncio.create_task(low_robot(client, args.low_tokens, 10_000 * (seed + i + 1), stop))
            for i in range(n_low)
        ]
        if n_low:
            await asyncio.sleep(args.settle)
        high = await action_robot(client, args, priority, seed)
        stop.set()
        low = [t for ts in await asyncio.gather(*lows) for t in ts]
    return high, low, time.perf_counter() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = setup(args)
    n = args.low_robots
    raw: dict[int, list[float]] = {1: [], n: []}
    # case -> (server, low robots, the action robot's priority)
    cases = {
        "alone": ("plain", 0, HIGH),
        f"{n} low robots, priority {HIGH}": ("plain", n, HIGH),
        f"{n} low robots, equal priority (FIFO)": ("plain", n, LOW),
        f"{n} low robots, priority {HIGH}, realtime isolation": ("realtime", n, HIGH),
    }
    high: dict[str, list[StreamTiming]] = {c: [] for c in cases}
    low: dict[str, list[StreamTiming]] = {c: [] for c in cases}
    low_s = dict.fromkeys(cases, 0.0)
    flags = ("--enable-priority-scheduling", "--max-running-requests", str(n))
    realtime = ("--realtime-priority", str(args.realtime_priority))
    realtime += ("--max-hold-ms", str(args.max_hold_ms))
    realtime += ("--realtime-reserve-ms", str(args.reserve_ms))
    cpu: dict[str, list[dict[str, float]]] = {c: [] for c in cases}
    with contextlib.ExitStack() as stack:
        servers = {
            "plain": stack.enter_context(serve(bench, *flags)),
            "realtime": stack.enter_context(serve(bench, *flags, *realtime)),
        }
        for node in servers.values():
            asyncio.run(phase(node.url, args, n, HIGH, seed=99))  # warm-up
        for r in range(args.rounds):
            print(f"  round {r + 1}/{args.rounds}: raw decode step", flush=True)
            for b in raw:
                raw[b] += measure_decode_steps(bench.path, b, 50)
            for case, (server, n_low, priority) in cases.items():
                print(f"  round {r + 1}/{args.rounds}: {case}", flush=True)
                node, before, t0 = (
                    servers[server],
                    cpu_snapshot(servers[server]),
                    time.perf_counter(),
                )
                h, lo, secs = asyncio.run(phase(node.url, args, n_low, priority, seed=r))
                cpu[case].append(
                    cores_by_process(before, cpu_snapshot(node), time.perf_counter() - t0)
                )
                high[case] += h
                low[case] += lo
                low_s[case] += secs
        held = httpx.get(f"{servers['realtime'].url}/get_server_info").json()["internal_states"][0]
    return report(bench, args, raw, (high, low, low_s), held) | {"cpu_cores": _mean_cores(cpu)}


def _mean_cores(cpu: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each case's cores busy per process, averaged over its rounds, printed as a table: with
    few cores, what the client and the node's other processes leave the scheduler."""
    out = {
        case: {k: sum(r[k] for r in rounds) / len(rounds) for k in rounds[0]}
        for case, rounds in cpu.items()
    }
    print("cores busy during each case (process CPU seconds / wall seconds):")
    print(
        table(
            [{"case": case, **cores} for case, cores in out.items()],
            ["case", *next(iter(out.values()))],
        )
    )
    return out


def _meta(timings: list[StreamTiming], key: str) -> list[float]:
    return [t.last["meta_info"].get(key) or 0 for t in timings if t.last]


def _row(
    case: str,
    timings: list[StreamTiming],
    low: list[StreamTiming],
    base: tuple[dict[str, float], dict[str, float]],
    low_tput_ratio: float,
) -> dict[str, Any]:
    """One case's row: the high robot's latencies and their ratios to `base` (alone), its
    scheduler queue time, and the low robots' streams, retractions and throughput ratio."""
    ttft, itl = summary_ms(ttfts(timings)), summary_ms(itls(timings))
    queue = summary_ms(_meta(timings, "queue_time"))  # scheduler arrival to first forward
    return {
        "case": case,
        "n": len(timings),
        **latency_cols("ttft", ttfts(timings)),
        **latency_cols("itl", itls(timings)),
        "ttft_ratio_p50": ttft["p50"] / base[0]["p50"],
        "ttft_ratio_p99": ttft["p99"] / base[0]["p99"],
        "itl_ratio_p50": itl["p50"] / base[1]["p50"],
        "itl_ratio_p99": itl["p99"] / base[1]["p99"],
        "queue_steps_max": max(_meta(timings, "queue_steps"), default=0),
        "sched_queue_p50": queue["p50"],
        "sched_queue_p99": queue["p99"],
        "low_streams": len(low),
        "low_retractions": sum(_meta(low, "num_retractions")),
        "low_tput_vs_priority": low_tput_ratio,
    }


def report(
    bench: BenchSetup,
    args: argparse.Namespace,
    raw: dict[int, list[float]],
    timings: tuple[dict[str, list[StreamTiming]], dict[str, list[StreamTiming]], dict[str, float]],
    realtime_state: dict[str, Any],
) -> dict[str, Any]:
    high, low, low_s = timings
    alone = next(iter(high.values()))
    base_ttft, base_itl = summary_ms(ttfts(alone)), summary_ms(itls(alone))
    low_tput = {c: sum(t.tokens for t in low[c]) / low_s[c] if low[c] else 0.0 for c in high}
    priority_tput = list(low_tput.values())[1]  # the same low robots, without isolation
    rows = [
        _row(case, t, low[case], (base_ttft, base_itl), low_tput[case] / priority_tput)
        | {"low_tok_s": low_tput[case]}
        for case, t in high.items()
    ]
    step_ratio = summary_ms(raw[args.low_robots])["p99"] / summary_ms(raw[1])["p99"]
    print(
        f"raw decode step p99, batch {args.low_robots} / batch 1 (what batching alone costs): "
        f"{step_ratio:.2f}"
    )
    series = {f"TTFT, {c}": ttfts(t) for c, t in high.items()}
    series |= {f"ITL, {c}": itls(t) for c, t in high.items()}
    result = {
        "raw_step_ms": {str(b): summary_ms(v) for b, v in raw.items()},
        "raw_step_ratio_p99": step_ratio,
        "priorities": {"high": HIGH, "low": LOW, "realtime": args.realtime_priority},
        "max_hold_ms": args.max_hold_ms,
        "action_tokens": args.action_tokens,
        "low_tokens": args.low_tokens,
        "realtime_held_steps": realtime_state.get("held_steps"),
        "realtime_step_time_ms": realtime_state.get("step_time_ms"),
        "realtime_period_ms": realtime_state.get("realtime_period_ms"),
        "reserve_ms": args.reserve_ms,
    }
    save_report(
        bench,
        "priority",
        f"high-priority robot alone vs with {args.low_robots} low-priority robots",
        rows,
        result,
        series,
    )
    return result | {"rows": rows}
