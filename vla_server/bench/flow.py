"""Denoised action chunks served (any family whose action head integrates a chunk): time to the
chunk, where its time goes, and the throughput of 1, 4 and 8 robots.

    python -m vla_server.bench flow [--tiny NAME | --model-path DIR] [--robots 1 4 8]
                                    [--chunks 20] [--out bench_out/flow] [--rtc]

In one run, on a tiny checkpoint (`--tiny`, built offline; `--tiny list` names them) or a
policy folder:

* served: for each robot count, that many robots in closed loops, each sending its next camera
  frames (new JPEGs, so no cache reuse) with its state and a seed to `POST /v1/actions` as soon
  as its chunk arrives: time to the chunk (P50/P99, the client's end to end), chunks per second,
  and from the node's own counters the mean width of its action-head passes (request rows per
  pass: several robots' denoising steps share one pass);
* where the chunk's time goes: the node's phase clocks (vision tower, decoder prefix, action
  head passes) over the one-robot run, per chunk and as shares of the model's time.

Writes `flow.json` and `flow.png` (time-to-chunk distributions per robot count) under `--out`.
With `--rtc`, the cost of real-time chunking instead (`flow_rtc.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from vla_harness.server_subprocess import run_server
from vla_harness.stats import plot_distributions, table, write_json
from vla_server.bench.flow_loop import PHASES, robot_interface, served_run
from vla_server.bench.flow_rtc import run_rtc
from vla_server.policies.registry import DEFAULT_DENOISING_TINY, tiny_checkpoint, tiny_checkpoints

__all__ = ["PHASES", "add_args", "phase_rows", "report", "run"]


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tiny", default=DEFAULT_DENOISING_TINY, help="a tiny checkpoint ('list' names them)"
    )
    p.add_argument("--model-path", default=None, help="a policy folder instead")
    p.add_argument("--robots", type=int, nargs="+", default=None, help="default 1 4 8 (--rtc: 1 8)")
    p.add_argument(
        "--rtc",
        action="store_true",
        help="time chunks with and without real-time chunking guidance (identity and vjp)",
    )
    p.add_argument("--chunks", type=int, default=20, help="chunks per robot per robot count")
    p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="extra serve flags")
    p.add_argument("--out", type=Path, default=Path("bench_out/flow"))


def _model_path(args: argparse.Namespace) -> Path:
    if args.model_path:
        return Path(args.model_path)
    if args.tiny == "list":
        raise SystemExit("tiny checkpoints: " + ", ".join(sorted(tiny_checkpoints())))
    try:
        return tiny_checkpoint(args.tiny)
    except ValueError as e:
        raise SystemExit(str(e)) from e


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = _model_path(args)
    if args.rtc:
        return run_rtc(args, path)
    args.robots = args.robots or [1, 4, 8]
    runs = []
    with run_server(path, Path(tempfile.mkdtemp(prefix="vla-bench-flow-")), *args.server_args) as s:
        robot_io = robot_interface(s)
        print(f"model {path}: {robot_io}")
        asyncio.run(served_run(s, robot_io, 1, 3, seed=99))  # warm-up
        for robots in args.robots:
            print(f"served: {robots} robot(s) x {args.chunks} chunks ...")
            runs.append(asyncio.run(served_run(s, robot_io, robots, args.chunks, seed=robots)))
    if not runs[0]["expert_passes"]:
        raise SystemExit(f"{path}: its chunks were not denoised (no action-head passes)")
    return report(args, path, runs)


def phase_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each phase's model time per chunk and its share of the model's time, from one run."""
    per_chunk = run["phase_ms_per_chunk"]
    model = sum(per_chunk.values())
    chunk = run["time_to_chunk_ms"]["mean"]
    return [
        {"phase": p, "ms_per_chunk": round(ms, 3), "share_of_model": round(ms / model, 3)}
        for p, ms in per_chunk.items()
    ] + [
        {"phase": "outside the model", "ms_per_chunk": round(chunk - model, 3),
         "share_of_model": None}
    ]  # fmt: skip


def report(args: argparse.Namespace, path: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    base = runs[0]["chunks_per_s"]
    rows = [
        {
            "robots": r["robots"],
            "chunk_p50_ms": round(r["time_to_chunk_ms"]["p50"], 2),
            "chunk_p99_ms": round(r["time_to_chunk_ms"]["p99"], 2),
            "chunks_per_s": round(r["chunks_per_s"], 2),
            "vs_first": round(r["chunks_per_s"] / base, 2),
            "rows_per_pass": round(r["rows_per_pass"], 2),
        }
        for r in runs
    ]
    phases = phase_rows(runs[0])
    print(f"where a chunk's time goes ({runs[0]['robots']} robot, node's phase clocks):")
    print(table(phases, list(phases[0])))
    print(table(rows, list(rows[0])))
    result = {"model": str(path), "phases": phases, "rows": rows, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "flow.json", result)
    series = {f"{r['robots']} robot(s)": r["latencies_s"] for r in runs}
    plot_distributions(args.out / "flow.png", f"{path.name}: time to the action chunk", series)
    return result
