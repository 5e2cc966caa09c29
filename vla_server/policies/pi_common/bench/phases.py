"""The pi family's model path against transformers', phase by phase: vision tower, prefix
(the PaliGemma prefill the action expert reads), denoising (the expert's Euler steps), each
timed in this one process on the same folder, the same observations and the same torch thread
count, the two paths interleaved so both see the same machine (`paths.py`). Every
observation's two chunks are compared, so both paths compute the same thing.

Per phase: the P50 over `repeats` observations of each path, and node / transformers; then one
`torch.profiler` run of each phase of each path and its top operators by self CPU time.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch

from vla_server.policies.pi_common.bench.paths import (
    PHASES,
    HfPath,
    ModelPath,
    NodePath,
    Observation,
    PhaseTimer,
    max_difference,
    observation,
)

TOP_OPS = 8


def time_paths(paths: list[ModelPath], folder: Path, repeats: int) -> dict[str, Any]:
    """`repeats` observations through every path in turn (after one untimed warm-up each)."""
    runs: dict[str, list[dict[str, float]]] = {p.name: [] for p in paths}
    worst = 0.0
    for i in range(repeats + 1):
        obs = observation(folder, seed=i)
        chunks = []
        for path in paths:
            timer = PhaseTimer()
            chunks.append(path.sample(obs, timer))
            if i:
                runs[path.name].append(timer.seconds)
        worst = max(worst, max_difference(chunks[0], chunks[-1]))
        print(f"  observation {i}/{repeats}{' (warm-up)' if not i else ''}", flush=True)
    return {"runs": runs, "max_chunk_difference": worst}


def phase_rows(timed: dict[str, Any]) -> list[dict[str, Any]]:
    node, ref = timed["runs"]["node"], timed["runs"]["transformers"]
    rows = []
    for phase in (*PHASES, "total"):
        pick = (lambda r: sum(r.values())) if phase == "total" else (lambda r, p=phase: r[p])
        n = 1000.0 * statistics.median(pick(r) for r in node)
        h = 1000.0 * statistics.median(pick(r) for r in ref)
        rows.append({"phase": phase, "node_ms": round(n, 2), "transformers_ms": round(h, 2),
                     "ratio": round(n / h, 3)})  # fmt: skip
    return rows


def top_operators(path: ModelPath, obs: Observation) -> dict[str, list[dict[str, Any]]]:
    """Each phase of one observation under the profiler: its top operators by self CPU time."""
    out: dict[str, list[dict[str, Any]]] = {}
    for phase in PHASES:
        timer = PhaseTimer(profiled=phase)
        path.sample(obs, timer)
        events = timer.profile.key_averages()
        events = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
        out[phase] = [
            {"op": e.key, "self_ms": round(e.self_cpu_time_total / 1000.0, 3), "calls": e.count}
            for e in events[:TOP_OPS]
        ]
    return out


def run_kind(kind: str, folder: Path, threads: list[int], repeats: int) -> dict[str, Any]:
    print(f"{kind}: loading the node's model and transformers' on {folder} ...", flush=True)
    paths: list[ModelPath] = [NodePath(folder), HfPath(folder, kind)]
    result: dict[str, Any] = {"kind": kind, "folder": str(folder), "by_threads": {}}
    for n in threads:
        torch.set_num_threads(n)
        print(f"{kind}, {n} torch thread(s): timing {repeats} observations ...", flush=True)
        timed = time_paths(paths, folder, repeats)
        result["by_threads"][str(n)] = {
            "rows": phase_rows(timed),
            "max_chunk_difference": timed["max_chunk_difference"],
            "runs": timed["runs"],
        }
    print(f"{kind}: profiling each phase ...", flush=True)
    obs = observation(folder, seed=0)
    result["top_operators"] = {p.name: top_operators(p, obs) for p in paths}
    return result
