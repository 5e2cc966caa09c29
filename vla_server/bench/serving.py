"""Serving benchmark: TTFT / ITL / e2e through the HTTP server at 1 and N concurrent streams,
against the raw decode step of the same model measured in-process in the same run.

    python -m vla_server.bench serving [--model demo|small|medium|1b | --model-path DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import torch

from vla_server.bench.checkpoints import SIZES, bench_model_path
from vla_server.bench.raw_step import measure_decode_steps
from vla_server.bench.stats import plot_distributions, summary_ms, table, write_json
from vla_server.bench.stream_client import StreamTiming, concurrent_streams
from vla_server.server_args import default_torch_threads
from vla_server.server_subprocess import ServerProcess, run_server


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="medium", choices=["demo", *SIZES])
    p.add_argument("--model-path", default=None, help="an HF checkpoint folder (overrides --model)")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per request")
    p.add_argument("--rounds", type=int, default=3, help="repetitions per concurrency level")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch threads of the model, in-process and in the server (default: the "
        "server's default)",
    )
    p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="extra serve flags")
    p.add_argument("--out", type=Path, default=Path("bench_out/serving"))


def resolve_model(args: argparse.Namespace) -> Path:
    if args.model_path:
        return Path(args.model_path)
    if args.model == "demo":
        from vla_server.model.demo import demo_model_path

        return demo_model_path()
    return bench_model_path(args.model)


def peak_rss_mb(server: ServerProcess) -> dict[str, float]:
    """Peak resident memory (VmHWM) of the node's three processes."""
    procs = {"main": server.proc.pid, **{p.name(): p.pid for p in server.node_children()}}
    out = {}
    for name, pid in procs.items():
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out[name] = int(line.split()[1]) / 1024
    return out


def served_round(server: ServerProcess, n: int, tokens: int) -> list[StreamTiming]:
    body = {
        "input_ids": list(range(10, 26)),
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True},
    }
    return asyncio.run(concurrent_streams(server.url, [body] * n))


def run(args: argparse.Namespace) -> dict[str, Any]:
    threads = args.torch_threads or default_torch_threads()
    torch.set_num_threads(threads)
    path = resolve_model(args)
    steps = args.tokens * args.rounds
    print(f"model {path}, torch threads {threads}; measuring the raw decode step ...", flush=True)
    raw = {c: measure_decode_steps(path, c, steps) for c in args.concurrency}
    served: dict[int, list[StreamTiming]] = {c: [] for c in args.concurrency}
    logs = Path(tempfile.mkdtemp(prefix="vla-bench-"))
    serve_flags = [
        "--max-running-requests",
        str(max(args.concurrency)),
        "--torch-num-threads",
        str(threads),
        *args.server_args,
    ]
    with run_server(path, logs, *serve_flags) as server:
        for c in args.concurrency:
            served_round(server, c, 8)  # warm-up
            for r in range(args.rounds):
                print(f"  served: {c} stream(s), round {r + 1}/{args.rounds}", flush=True)
                served[c] += served_round(server, c, args.tokens)
        rss = peak_rss_mb(server)
    print("measuring the raw step again (drift check) ...", flush=True)
    for c in args.concurrency:
        raw[c] += measure_decode_steps(path, c, steps)
    return report(args, path, threads, raw, served, rss)


def report(
    args: argparse.Namespace,
    path: Path,
    threads: int,
    raw: dict[int, list[float]],
    served: dict[int, list[StreamTiming]],
    rss: dict[str, float],
) -> dict[str, Any]:
    rows = []
    for c in args.concurrency:
        itl = summary_ms([x for t in served[c] for x in t.itls])
        step = summary_ms(raw[c])
        rows.append(
            {
                "streams": c,
                "ttft_p50": summary_ms([t.ttft for t in served[c]])["p50"],
                "ttft_p99": summary_ms([t.ttft for t in served[c]])["p99"],
                "e2e_p50": summary_ms([t.e2e for t in served[c]])["p50"],
                "itl_p50": itl["p50"],
                "itl_p90": itl["p90"],
                "itl_p99": itl["p99"],
                "raw_p50": step["p50"],
                "raw_p99": step["p99"],
                "ratio_p50": itl["p50"] / step["p50"],
                "ratio_p99": itl["p99"] / step["p99"],
                "overhead_ms": itl["p50"] - step["p50"],
            }
        )
    cols = [
        "streams",
        "ttft_p50",
        "ttft_p99",
        "e2e_p50",
        "itl_p50",
        "itl_p90",
        "itl_p99",
        "raw_p50",
        "raw_p99",
        "ratio_p50",
        "ratio_p99",
        "overhead_ms",
    ]
    print(
        f"\nmodel {path.name}, {args.tokens} tokens x {args.rounds} rounds, torch threads {threads}"
    )
    print("latencies in ms; ratio = served ITL / raw in-process decode step (same run)")
    print(table(rows, cols))
    print("peak RSS (MB): " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))
    result = {"model": str(path), "torch_threads": threads, "rows": rows, "peak_rss_mb": rss}
    write_json(args.out / f"serving-{path.name}.json", result)
    series: dict[str, list[float]] = {}
    for c in args.concurrency:
        series[f"served ITL, {c} stream(s)"] = [x for t in served[c] for x in t.itls]
        series[f"raw step, batch {c}"] = raw[c]
    plot_distributions(
        args.out / f"serving-{path.name}.png", f"ITL vs raw step: {path.name}", series
    )
    print(f"wrote {args.out}/serving-{path.name}.json and .png")
    return result
