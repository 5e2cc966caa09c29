"""The priority benchmark's table, JSON and plot: the action robot's latencies per case against
alone, the low robots' throughput against their own alone, greedy outputs compared by prompt, the
cores each process kept busy, and the node's own isolation counters."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from vla_harness.stats import summary_ms, table
from vla_server.bench.scheduler_common import BenchSetup, latency_cols, save_report
from vla_server.bench.stream_client import StreamTiming

Seeded = list[tuple[int, StreamTiming]]  # (prompt seed, its stream)


@dataclass
class Phase:
    high: Seeded  # the action robot's measured requests
    low: Seeded  # the low robots' streams that ran meanwhile
    seconds: float  # from the low robots' start to their end
    low_cpu_s: float  # CPU seconds of the low robots' own client process (0: in this process)


def _meta(timings: list[StreamTiming], key: str) -> list[float]:
    return [t.last["meta_info"].get(key) or 0 for t in timings if t.last]


def _differ(got: Seeded, ref: dict[int, list[int]]) -> tuple[int, int]:
    """(compared, differing) greedy outputs of `got` against `ref`, matched by prompt seed."""
    pairs = [(t.output_ids, ref[s]) for s, t in got if s in ref]
    return len(pairs), sum(a != b for a, b in pairs)


def _high_cols(high: Seeded, alone: Seeded) -> dict[str, Any]:
    timings = [t for _, t in high]
    base = [t for _, t in alone]
    ttft, itl = [t.ttft for t in timings], [x for t in timings for x in t.itls]
    b_ttft = summary_ms([t.ttft for t in base])
    b_itl = summary_ms([x for t in base for x in t.itls])
    queue = summary_ms(_meta(timings, "queue_time"))  # scheduler arrival to first forward
    prep = summary_ms(_meta(timings, "preprocess_time"))  # main process: parse to tokenized
    compared, differ = _differ(high, {s: t.output_ids for s, t in alone})
    return {
        "n": len(timings),
        **latency_cols("ttft", ttft),
        **latency_cols("itl", itl),
        "ttft_ratio_p50": summary_ms(ttft)["p50"] / b_ttft["p50"],
        "ttft_ratio_p99": summary_ms(ttft)["p99"] / b_ttft["p99"],
        "itl_ratio_p50": summary_ms(itl)["p50"] / b_itl["p50"],
        "itl_ratio_p99": summary_ms(itl)["p99"] / b_itl["p99"],
        "queue_steps_max": max(_meta(timings, "queue_steps"), default=0),
        "sched_queue_p50": queue["p50"],
        "sched_queue_p99": queue["p99"],
        "preprocess_p50": prep["p50"],
        "preprocess_p99": prep["p99"],
        "high_outputs_differ": f"{differ}/{compared}",
    }


def _low_cols(phases: list[Phase], lows_alone: list[Phase], refs: dict[int, list[int]]) -> dict:
    low = [x for ph in phases for x in ph.low]
    tput = sum(t.tokens for _, t in low) / sum(ph.seconds for ph in phases)
    base = [x for ph in lows_alone for x in ph.low]
    base_tput = sum(t.tokens for _, t in base) / sum(ph.seconds for ph in lows_alone)
    c1, d1 = _differ(low, {s: t.output_ids for s, t in base})
    c2, d2 = _differ(low, refs)
    return {
        "low_streams": len(low),
        "low_retractions": sum(_meta([t for _, t in low], "num_retractions")),
        "low_tok_s": tput,
        "low_tput_vs_alone": tput / base_tput,
        "low_outputs_differ_vs_lows_alone": f"{d1}/{c1}",
        "low_outputs_differ_vs_served_alone": f"{d2}/{c2}",
    }


def report(
    bench: BenchSetup,
    args: argparse.Namespace,
    raw: dict[int, list[float]],
    phases: dict[str, list[Phase]],
    cpu: dict[str, list[dict[str, float]]],
    alone_refs: dict[int, list[int]],
    node_state: dict[str, Any],
) -> dict[str, Any]:
    """`node_state`: the realtime server's /get_server_info, and `lane_floor` (lane_floor.py)."""
    names = list(phases)
    alone = [x for ph in phases[names[0]] for x in ph.high]
    lows_alone = phases[names[1]]
    rows = []
    for case, phs in phases.items():
        row: dict[str, Any] = {"case": case}
        high = [x for ph in phs for x in ph.high]
        if high:
            row |= _high_cols(high, alone)
        if any(ph.low for ph in phs):
            row |= _low_cols(phs, lows_alone, alone_refs)
        rows.append(row)
    n = args.low_robots
    step_ratio = summary_ms(raw[n])["p99"] / summary_ms(raw[1])["p99"]
    print(f"raw decode step p99, batch {n} / batch 1 (what batching alone costs): {step_ratio:.2f}")
    series = {}
    for case, phs in phases.items():
        high = [t for ph in phs for _, t in ph.high]
        if high:
            series[f"TTFT, {case}"] = [t.ttft for t in high]
            series[f"ITL, {case}"] = [x for t in high for x in t.itls]
    state = node_state["internal_states"][0]
    result = {
        "workload": vars(args.wl),
        "raw_step_ms": {str(b): summary_ms(v) for b, v in raw.items()},
        "raw_step_ratio_p99": step_ratio,
        "realtime_held_steps": state.get("held_steps"),
        "realtime_step_time_ms": state.get("step_time_ms"),
        "realtime_period_ms": state.get("realtime_period_ms"),
        "lane_floor": node_state.get("lane_floor"),
        "isolation_bound": isolation_bound(state, node_state.get("stream_order") or {}, args),
        "cpu_cores": _mean_cores(cpu),
    }
    save_report(
        bench,
        f"priority-{args.wl.name}",
        f"{args.wl.name} workload: high-priority robot alone vs with {n} low-priority robots",
        rows,
        result,
        series,
    )
    return result | {"rows": rows}


def isolation_bound(
    state: dict[str, Any], order: dict[str, Any], args: argparse.Namespace
) -> dict[str, float]:
    """The realtime server's own counters over the whole run, against `--max-hold-ms` plus the
    longest step (either lane): the longest a less important stream went between two outputs
    handed to its client (main process, deferrals included: what the client sees), and the two
    places that may hold it back, each on its own: the longest a held request went between two
    of its steps (scheduler) and the longest an output was deferred (main process; the timer of
    a hold that ran out fires when the event loop is next free)."""
    stream_gap = order.get("max_stream_gap_ms", 0.0)
    gap = state.get("max_unprotected_gap_ms", 0.0)
    defer = order.get("max_output_defer_ms", 0.0)
    step = state.get("max_step_ms", 0.0)
    hold = args.wl.max_hold_ms
    bound = {
        "max_stream_gap_ms": stream_gap,
        "max_gap_ms": gap,
        "max_output_defer_ms": defer,
        "max_step_ms": step,
        "max_hold_ms": hold,
        "background_steps": state.get("background_steps", 0),
        "deferred_outputs": order.get("deferred_outputs", 0),
        "scheduler_ratio": gap / (hold + step),
        "defer_ratio": defer / (hold + step),
        "ratio": stream_gap / (hold + step),
    }
    print("isolation bound (node counters): " + ", ".join(f"{k} {v:.1f}" for k, v in bound.items()))
    return bound


def _mean_cores(cpu: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each case's cores busy per process, averaged over its rounds, printed as a table: with
    few cores, what the clients and the node's other processes leave the scheduler."""
    out = {
        case: {k: sum(r.get(k, 0.0) for r in rounds) / len(rounds) for k in rounds[0]}
        for case, rounds in cpu.items()
    }
    print("cores busy during each case (process CPU seconds / wall seconds):")
    columns = list(dict.fromkeys(k for cores in out.values() for k in cores))
    print(table([{"case": case, **cores} for case, cores in out.items()], ["case", *columns]))
    return out
