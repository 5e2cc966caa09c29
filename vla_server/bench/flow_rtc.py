"""The cost of real-time chunking (RTC) served: time to the chunk without guidance, with
LeRobot's identity guidance and with the paper's VJP, at each robot count, in one run.

    python -m vla_server.bench flow --rtc [--tiny NAME | --model-path DIR] [--robots 1 8]
                                          [--chunks 20] [--out bench_out/flow]

The robots run closed loops as `python -m vla_server.bench flow` does (`flow_loop.py`); here each
first gets one untimed chunk, then every timed request carries the tail of its previous chunk:
it has executed d = max(1, chunk / 10) of its actions (`prev_chunk` = the rest), will execute d
more while the new chunk is computed (`inference_delay` = d), the soft weights end at
`execution_horizon` = max(d, chunk / 2), `rtc.schedule` exp (the paper's). The three modes run
one after another at each robot count, on one node. Reported per (robots, mode): time to the
chunk (P50/P99), chunks per second, action-head passes per chunk and the head's time per chunk
(the node's phase clock: a vjp pass includes its backward; both counted over the timed chunks
and each robot's untimed first one), and the P50 against the unguided run's. Every run sends
new frames (no prefix-cache hits across runs). Writes `flow-rtc.json` and `flow-rtc.png` under
`--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vla_harness.server_subprocess import run_server
from vla_harness.stats import plot_distributions, table, write_json
from vla_server.bench.flow_loop import robot_interface, served_run

MODES = ("none", "identity", "vjp")


@dataclass(frozen=True)
class RtcLoad:
    """What each timed request of one mode adds (`flow.Guided`)."""

    jacobian: str | None  # None: no guidance
    delay: int
    horizon: int

    @classmethod
    def for_chunk(cls, chunk: int, mode: str) -> RtcLoad:
        delay = max(1, chunk // 10)
        return cls(None if mode == "none" else mode, delay, max(delay, chunk // 2))

    def describe(self) -> dict[str, Any]:
        return {"jacobian": self.jacobian, "inference_delay": self.delay,
                "execution_horizon": self.horizon, "schedule": "exp"}  # fmt: skip

    def fields(self, prev: list[list[float]]) -> dict[str, Any]:
        if self.jacobian is None:
            return {}
        return {
            "prev_chunk": prev[self.delay :],
            "inference_delay": self.delay,
            "execution_horizon": self.horizon,
            "rtc": {"schedule": "exp", "jacobian": self.jacobian},
        }


def run_rtc(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    robot_counts = args.robots or [1, 8]
    runs = []
    with run_server(path, Path(tempfile.mkdtemp(prefix="vla-bench-flow-rtc-")),
                    *args.server_args) as s:  # fmt: skip
        robot_io = robot_interface(s)
        chunk = robot_io["chunk_size"]
        print(f"model {path}: {robot_io}")
        warm = RtcLoad.for_chunk(chunk, "vjp")
        asyncio.run(served_run(s, robot_io, 1, 2, seed=99, guided=warm))  # warm-up, both paths
        for robots in robot_counts:
            for m, mode in enumerate(MODES):
                load = RtcLoad.for_chunk(chunk, mode)
                print(f"served: {robots} robot(s) x {args.chunks} chunks, guidance {mode} ...")
                seed = 10 * robots + m  # new frames for every run: no prefix-cache hits
                out = asyncio.run(
                    served_run(s, robot_io, robots, args.chunks, seed=seed, guided=load)
                )
                runs.append({**out, "guidance": mode, "load": load.describe()})
    if not runs[0]["expert_passes"]:
        raise SystemExit(f"{path}: its chunks were not denoised (no action-head passes)")
    return report_rtc(args, path, runs)


def report_rtc(args: argparse.Namespace, path: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    unguided = {r["robots"]: r["time_to_chunk_ms"]["p50"] for r in runs if r["guidance"] == "none"}
    rows = [
        {
            "robots": r["robots"],
            "guidance": r["guidance"],
            "chunk_p50_ms": round(r["time_to_chunk_ms"]["p50"], 2),
            "chunk_p99_ms": round(r["time_to_chunk_ms"]["p99"], 2),
            "chunks_per_s": round(r["chunks_per_s"], 2),
            "p50_vs_unguided": round(r["time_to_chunk_ms"]["p50"] / unguided[r["robots"]], 2),
            "passes_per_chunk": round(r["expert_passes"] / r["chunks"], 2),
            "head_ms_per_chunk": round(r["phase_ms_per_chunk"]["action_head"], 3),
        }
        for r in runs
    ]
    print(table(rows, list(rows[0])))
    result = {"model": str(path), "rows": rows, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "flow-rtc.json", result)
    series = {f"{r['robots']} robot(s), {r['guidance']}": r["latencies_s"] for r in runs}
    title = f"{path.name}: time to the chunk, RTC guidance or none"
    plot_distributions(args.out / "flow-rtc.png", title, series)
    return result
