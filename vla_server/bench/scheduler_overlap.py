"""Overlap loop on vs off: served ITL / raw decode step at 1 and N streams.

Two servers of the same model run side by side, one with the overlap loop and one with
`--disable-overlap-schedule`; their rounds alternate so load drift on the machine hits both.
The raw step (batch 1 and N, through the scheduler's own BatchRunner) is measured in this
process at the servers' torch thread count, in turns with the served rounds.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from vla_harness.stats import summary_ms
from vla_server.bench.raw_step import measure_decode_steps
from vla_server.bench.scheduler_common import (
    BenchSetup,
    add_common_args,
    itls,
    latency_cols,
    save_report,
    serve,
    setup,
)
from vla_server.bench.serving import served_round
from vla_server.bench.stream_client import StreamTiming

MODES = {"overlap on": (), "overlap off": ("--disable-overlap-schedule",)}


def add_args(p: argparse.ArgumentParser) -> None:
    add_common_args(p)
    p.add_argument("--tokens", type=int, default=32, help="new tokens per stream")
    p.add_argument("--rounds", type=int, default=6, help="rounds per mode and stream count")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = setup(args)
    raw: dict[int, list[float]] = {c: [] for c in args.concurrency}
    served: dict[tuple[str, int], list[StreamTiming]] = {}
    mrr = ("--max-running-requests", str(max(args.concurrency)))
    with contextlib.ExitStack() as stack:
        servers = {m: stack.enter_context(serve(bench, *mrr, *f)) for m, f in MODES.items()}
        for server in servers.values():
            for c in args.concurrency:
                served_round(server, c, 8)  # warm-up
        # Raw step and both servers take turns, so load drift on the machine hits all three.
        for r in range(args.rounds):
            for c in args.concurrency:
                print(f"  round {r + 1}/{args.rounds}, {c} stream(s): raw step", flush=True)
                raw[c] += measure_decode_steps(bench.path, c, args.tokens)
                for mode, server in servers.items():
                    print(f"  round {r + 1}/{args.rounds}, {c} stream(s): {mode}", flush=True)
                    served.setdefault((mode, c), []).extend(served_round(server, c, args.tokens))
    return report(bench, args, raw, served)


def report(
    bench: BenchSetup,
    args: argparse.Namespace,
    raw: dict[int, list[float]],
    served: dict[tuple[str, int], list[StreamTiming]],
) -> dict[str, Any]:
    rows = []
    for (mode, c), timings in served.items():
        itl, step = summary_ms(itls(timings)), summary_ms(raw[c])
        rows.append(
            {
                "mode": mode,
                "streams": c,
                **latency_cols("itl", itls(timings)),
                "raw_p50": step["p50"],
                "raw_p99": step["p99"],
                "ratio_p50": itl["p50"] / step["p50"],
                "ratio_p99": itl["p99"] / step["p99"],
                "ratio_mean": itl["mean"] / step["mean"],
            }
        )
    rows.sort(key=lambda r: (r["streams"], r["mode"]))
    series = {f"ITL, {m}, {c} stream(s)": itls(t) for (m, c), t in served.items()}
    series |= {f"raw step, batch {c}": raw[c] for c in args.concurrency}
    result = {"torch_threads": bench.threads, "tokens": args.tokens, "rounds": args.rounds}
    save_report(
        bench,
        "overlap",
        "overlap on vs off: served ITL / raw decode step (same run)",
        rows,
        result,
        series,
    )
    return result | {"rows": rows}
