"""Denoised action chunks served (any family whose action head integrates a chunk): time to the
chunk, where its time goes, and the throughput of 1, 4 and 8 robots.

    python -m vla_server.bench flow [--tiny NAME | --model-path DIR] [--robots 1 4 8]
                                    [--chunks 20] [--out bench_out/flow]

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
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from vla_harness.server_subprocess import ServerProcess, run_server
from vla_harness.stats import plot_distributions, summary_ms, table, write_json
from vla_server.bench.multimodal import camera_frames
from vla_server.policies.registry import DEFAULT_DENOISING_TINY, tiny_checkpoint, tiny_checkpoints

INSTRUCTION = "pick up the red block and put it in the bowl"
PHASES = ("vision", "decoder", "action_head")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tiny", default=DEFAULT_DENOISING_TINY, help="a tiny checkpoint ('list' names them)"
    )
    p.add_argument("--model-path", default=None, help="a policy folder instead")
    p.add_argument("--robots", type=int, nargs="+", default=[1, 4, 8])
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


async def _robot(
    client: httpx.AsyncClient, robot_io: dict[str, Any], frames: list[str], robot: int, n: int
) -> list[float]:
    cams = len(robot_io["cameras"])
    out = []
    for i in range(n):
        k = (robot * n + i) * cams
        body = {
            "instruction": INSTRUCTION,
            "image_data": frames[k : k + cams],
            "state": [0.1 * (robot + 1)] * robot_io["state_dim"],
            "seed": robot * n + i,
        }
        t0 = time.perf_counter()
        reply = await client.post("/v1/actions", json=body)
        out.append(time.perf_counter() - t0)
        if reply.status_code != 200 or len(reply.json()["actions"]) != robot_io["chunk_size"]:
            raise SystemExit(f"/v1/actions failed: {reply.status_code} {reply.text[:300]}")
    return out


async def _counters(client: httpx.AsyncClient) -> dict[str, Any]:
    info = (await client.get("/get_server_info")).json()
    return info["internal_states"][0]["model_counters"]


async def served_run(
    server: ServerProcess, robot_io: dict[str, Any], robots: int, chunks: int, seed: int
) -> dict[str, Any]:
    frames = camera_frames(robots * chunks * len(robot_io["cameras"]), 640, 480, 90, seed)
    async with server.async_client(timeout=600) as client:
        before = await _counters(client)
        t0 = time.perf_counter()
        per_robot = await asyncio.gather(
            *(_robot(client, robot_io, frames, r, chunks) for r in range(robots))
        )
        wall = time.perf_counter() - t0
        after = await _counters(client)
    latencies = [t for robot in per_robot for t in robot]
    passes = after["expert_passes"] - before["expert_passes"]
    rows = after["expert_rows"] - before["expert_rows"]
    seconds = {p: after["seconds"].get(p, 0.0) - before["seconds"].get(p, 0.0) for p in PHASES}
    return {
        "robots": robots,
        "chunks": len(latencies),
        "time_to_chunk_ms": summary_ms(latencies),
        "chunks_per_s": len(latencies) / wall,
        "expert_passes": passes,
        "rows_per_pass": rows / passes if passes else 0.0,
        "phase_ms_per_chunk": {p: 1000.0 * s / len(latencies) for p, s in seconds.items()},
        "latencies_s": latencies,
    }


def robot_interface(server: ServerProcess) -> dict[str, Any]:
    info = httpx.get(server.url + "/get_model_info", timeout=30).json()
    if "robot" not in info:
        raise SystemExit(f"{info['model_path']} has no robot interface (cameras, state, chunk)")
    return info["robot"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = _model_path(args)
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
