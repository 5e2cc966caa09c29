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
import time
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
        chunks = {}
        for path in paths if i % 2 else paths[::-1]:  # each path first every other time
            timer = PhaseTimer()
            chunks[path.name] = path.sample(obs, timer)
            if i:
                runs[path.name].append(timer.seconds)
        worst = max(worst, max_difference(*chunks.values()))
        print(f"  observation {i}/{repeats}{' (warm-up)' if not i else ''}", flush=True)
    return {"runs": runs, "max_chunk_difference": worst}


def phase_rows(timed: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase: each path's P50, their ratio, and the median of the per-observation ratios
    (the two paths ran each observation back to back: the machine's drift cancels)."""
    node, ref = timed["runs"]["node"], timed["runs"]["transformers"]
    rows = []
    for phase in (*PHASES, "total"):
        pick = (lambda r: sum(r.values())) if phase == "total" else (lambda r, p=phase: r[p])
        n = 1000.0 * statistics.median(pick(r) for r in node)
        h = 1000.0 * statistics.median(pick(r) for r in ref)
        paired = statistics.median(pick(a) / pick(b) for a, b in zip(node, ref, strict=True))
        rows.append({"phase": phase, "node_ms": round(n, 2), "transformers_ms": round(h, 2),
                     "ratio": round(n / h, 3), "paired_ratio": round(paired, 3)})  # fmt: skip
    return rows


def top_operators(path: ModelPath, obs: Observation) -> dict[str, list[dict[str, Any]]]:
    """Each phase of one observation under the profiler: its top operators by self CPU time."""
    out: dict[str, list[dict[str, Any]]] = {}
    for phase in PHASES:
        timer = PhaseTimer(profiled=phase)
        path.sample(obs, timer)
        out[phase] = _top(timer.profile)
    return out


def _top(prof: Any) -> list[dict[str, Any]]:
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [
        {"op": e.key, "self_ms": round(e.self_cpu_time_total / 1000.0, 3), "calls": e.count}
        for e in events[:TOP_OPS]
    ]


@torch.inference_mode()
def batched_pass(node: NodePath, folder: Path, rows: int, passes: int = 5) -> dict[str, Any]:
    """What batching buys the action head: one pass over `rows` robots' prefixes against a
    lone robot's pass (ms per pass and per row, median of `passes`), and the profile of the
    batched pass."""
    from torch.profiler import ProfilerActivity, profile

    obs = [observation(folder, seed=900 + i) for i in range(rows)]
    held = [node.prefill(o, PhaseTimer()) for o in obs]
    r, out = node.runner, {"rows": rows, "threads": torch.get_num_threads()}
    try:
        for b in (1, rows):
            prefix = r.paged_prefix([h.row for h in held[:b]], [h.length for h in held[:b]])
            x = torch.cat([o.noise for o in obs[:b]])
            state, t = torch.stack([o.state for o in obs[:b]]), torch.full((b,), 0.5)
            r.velocity(prefix, x, t, state)  # warm
            times = []
            for _ in range(passes):
                t0 = time.perf_counter()
                r.velocity(prefix, x, t, state)
                times.append(time.perf_counter() - t0)
            out["pass_ms_batched" if b > 1 else "pass_ms_one"] = 1e3 * statistics.median(times)
        out["per_row_ms_batched"] = out["pass_ms_batched"] / rows
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            r.velocity(prefix, x, t, state)
        out["top_operators"] = _top(prof)
    finally:
        for h in held:
            node.release(h)
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
    result["profile_threads"] = torch.get_num_threads()
    print(f"{kind}: one action-head pass over 8 robots' prefixes vs one robot's ...", flush=True)
    result["batched_pass"] = batched_pass(paths[0], folder, rows=8)
    return result
