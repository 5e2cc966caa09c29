"""pi0 / pi0.5 serving: time to the action chunk, its prefix vs denoising share, and the
throughput of 1, 4 and 8 robots.

    python -m vla_server.bench flow [--kind pi0|pi05 | --model-path DIR] [--robots 1 4 8]
                                    [--chunks 20] [--out bench_out/flow]

In one run, on the tiny checkpoint of `--kind` (built offline) or `--model-path`:

* in-process (`flow_split`): the vision tower, the prefix forward and the denoising passes of
  one chunk, timed on the node's own ModelRunner: each phase's share of the chunk;
* served: for each robot count, that many robots in closed loops, each sending its next camera
  frames (new JPEGs, so no cache reuse) with its state and a seed to `POST /v1/actions` as soon
  as its chunk arrives: time to the chunk (P50/P99, the client's end to end), chunks per second,
  and from the node's own counters the mean width of its expert passes (request rows per pass:
  several robots' denoising steps share one pass).

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
from vla_server.bench.flow_split import INSTRUCTION, chunk_phases
from vla_server.bench.multimodal import camera_frames
from vla_server.policies.pi0.family import Pi0Family
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.registry import detect


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kind", choices=("pi0", "pi05"), default="pi0", help="the tiny checkpoint")
    p.add_argument("--model-path", default=None, help="a pi0 / pi0.5 folder instead")
    p.add_argument("--robots", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--chunks", type=int, default=20, help="chunks per robot per robot count")
    p.add_argument("--reps", type=int, default=20, help="in-process chunks timed by phase")
    p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="extra serve flags")
    p.add_argument("--out", type=Path, default=Path("bench_out/flow"))


def _model_path(args: argparse.Namespace) -> Path:
    if args.model_path:
        return Path(args.model_path)
    from vla_server.policies.pi0.tiny import pi0_model_path

    return pi0_model_path(args.kind, "bare")


async def _robot(
    client: httpx.AsyncClient, spec: LeRobotPolicySpec, frames: list[str], robot: int, n: int
) -> list[float]:
    cams = len(spec.cameras)
    out = []
    for i in range(n):
        k = (robot * n + i) * cams
        body = {
            "instruction": INSTRUCTION,
            "image_data": frames[k : k + cams],
            "state": [0.1 * (robot + 1)] * spec.state_dim,
            "seed": robot * n + i,
        }
        t0 = time.perf_counter()
        reply = await client.post("/v1/actions", json=body)
        out.append(time.perf_counter() - t0)
        if reply.status_code != 200 or len(reply.json()["actions"]) != spec.chunk_size:
            raise SystemExit(f"/v1/actions failed: {reply.status_code} {reply.text[:300]}")
    return out


async def _counters(client: httpx.AsyncClient) -> dict[str, int]:
    info = (await client.get("/get_server_info")).json()
    return info["internal_states"][0]["model_counters"]


async def served_run(
    server: ServerProcess, spec: LeRobotPolicySpec, robots: int, chunks: int, seed: int
) -> dict[str, Any]:
    frames = camera_frames(robots * chunks * len(spec.cameras), 640, 480, 90, seed)
    async with server.async_client(timeout=600) as client:
        before = await _counters(client)
        t0 = time.perf_counter()
        per_robot = await asyncio.gather(
            *(_robot(client, spec, frames, r, chunks) for r in range(robots))
        )
        wall = time.perf_counter() - t0
        after = await _counters(client)
    latencies = [t for robot in per_robot for t in robot]
    passes = after["expert_passes"] - before["expert_passes"]
    rows = after["expert_rows"] - before["expert_rows"]
    return {
        "robots": robots,
        "chunks": len(latencies),
        "time_to_chunk_ms": summary_ms(latencies),
        "chunks_per_s": len(latencies) / wall,
        "expert_passes": passes,
        "rows_per_pass": rows / passes if passes else 0.0,
        "latencies_s": latencies,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = _model_path(args)
    family = detect(path)
    if not isinstance(family, Pi0Family):
        raise SystemExit(f"{path} is not a pi0 / pi0.5 policy")
    spec = family.spec
    print(f"model {path} ({spec.policy_type}); timing {args.reps} chunks by phase in-process ...")
    split = chunk_phases(path, args.reps)
    runs = []
    with run_server(path, Path(tempfile.mkdtemp(prefix="vla-bench-flow-")), *args.server_args) as s:
        asyncio.run(served_run(s, spec, 1, 3, seed=99))  # warm-up
        for robots in args.robots:
            print(f"served: {robots} robot(s) x {args.chunks} chunks ...")
            runs.append(asyncio.run(served_run(s, spec, robots, args.chunks, seed=robots)))
    return report(args, path, split, runs)


def report(
    args: argparse.Namespace, path: Path, split: dict[str, Any], runs: list[dict[str, Any]]
) -> dict[str, Any]:
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
    phases = [
        {"phase": name, **{k: round(v, 3) for k, v in s.items()}, "share_p50": round(share, 3)}
        for (name, s), share in zip(
            split["phases_ms"].items(), split["share_p50"].values(), strict=True
        )
    ]
    print(table(phases, list(phases[0])))
    print(table(rows, list(rows[0])))
    result = {"model": str(path), "chunk_phases": split, "phases": phases, "rows": rows,
              "runs": runs}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "flow.json", result)
    series = {f"{r['robots']} robot(s)": r["latencies_s"] for r in runs}
    plot_distributions(args.out / "flow.png", "pi0 time to the action chunk", series)
    return result
