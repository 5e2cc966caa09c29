"""The pi family on a GPU (`bench gpu`'s pi section): real-size random-weight pi0 and pi0.5.

Per kind, on the released models' dimensions (`paligemma_dims.REAL`, built on the GPU and
saved in bfloat16 on first use, about 6.6 GB each) in bfloat16:

* in process, one observation at a time: the node's model path (vision, prefix, the Euler
  steps back to back) against transformers' `PI0ForConditionalGeneration` /
  `PI05ForConditionalGeneration` on the same weights and observation, each phase timed to a
  CUDA synchronize, and how far the two chunks are apart;
* served: time to chunk and chunks/s of 1, 4 and 8 robots in closed loops on `/v1/actions`
  (new JPEG frames every request), against transformers' serial chunks/s.

The denoising loop runs eagerly: CUDA graphs for it are not implemented (the JSON says so).
`--pi-size tiny` runs the same section on the tests' tiny folders, on the CPU too, to develop
it. Writes `gpu-pi.json` and `gpu-pi.png`.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from vla_harness.server_subprocess import run_server
from vla_harness.stats import write_json
from vla_server.bench.flow_loop import robot_interface, served_run
from vla_server.policies.pi_common.bench.paths import (
    PHASES,
    HfPath,
    NodePath,
    PhaseTimer,
    max_difference,
)
from vla_server.policies.pi_common.bench.paths import observation as make_observation

KINDS = ("pi0", "pi05")
CUDA_GRAPHS = "not implemented: the denoising loop runs eagerly"


def _paths_p50(folder: Path, kind: str, device: str, dtype: torch.dtype, n: int) -> dict[str, Any]:
    """Each path's P50 per phase over `n` observations (after one warm-up), one path loaded at
    a time (two real-size models need not fit at once), and the chunks' largest difference."""
    observations = [make_observation(folder, seed=i) for i in range(n + 1)]
    out: dict[str, Any] = {}
    chunks: dict[str, list[torch.Tensor]] = {}
    for name, build in (("node", lambda: NodePath(folder, device, dtype)),
                        ("transformers", lambda: HfPath(folder, kind, device, dtype))):  # fmt: skip
        path = build()
        timers = [PhaseTimer(device=device) for _ in observations]
        chunks[name] = [path.sample(o, t) for o, t in zip(observations, timers, strict=True)]
        out[name] = {p: 1e3 * statistics.median(t.seconds[p] for t in timers[1:]) for p in PHASES}
        out[name]["total"] = sum(out[name][p] for p in PHASES)
        del path
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    pairs = zip(chunks["node"], chunks["transformers"], strict=True)
    out["max_chunk_difference"] = max(max_difference(a, b) for a, b in pairs)
    return out


def _served(folder: Path, dtype: torch.dtype, robots: tuple[int, ...], chunks: int) -> list[dict]:
    flags = ["--dtype", {torch.bfloat16: "bfloat16", torch.float32: "float32"}[dtype]]
    rows = []
    with run_server(folder, Path(tempfile.mkdtemp(prefix="vla-gpu-pi-")), *flags) as server:
        robot_io = robot_interface(server)
        asyncio.run(served_run(server, robot_io, 1, 2, seed=99))  # warm-up
        for n in robots:
            run = asyncio.run(served_run(server, robot_io, n, chunks, seed=n))
            rows.append({"robots": n, "chunk_p50_ms": round(run["time_to_chunk_ms"]["p50"], 2),
                         "chunks_per_s": round(run["chunks_per_s"], 3),
                         "rows_per_pass": round(run["rows_per_pass"], 2)})  # fmt: skip
    return rows


def pi_section(size: str, device: str, robots: tuple[int, ...] = (1, 4, 8), chunks: int = 8,
               out: Path = Path("bench_out/gpu")) -> dict[str, Any]:  # fmt: skip
    from vla_server.policies.pi0.tiny import sized_pi0_model_path

    dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    result: dict[str, Any] = {"size": size, "device": device, "dtype": str(dtype),
                              "cuda_graphs": CUDA_GRAPHS, "kinds": {}}  # fmt: skip
    for kind in KINDS:
        print(f"gpu pi: {kind} ({size}): the folder (built on first use) ...", flush=True)
        folder = sized_pi0_model_path(kind, size, device)
        print(f"gpu pi: {kind}: in process, node vs transformers ...", flush=True)
        phases = _paths_p50(folder, kind, device, dtype, n=chunks)
        print(f"gpu pi: {kind}: served, {robots} robots ...", flush=True)
        served = _served(folder, dtype, robots, chunks)
        serial = 1e3 / phases["transformers"]["total"]
        for row in served:
            row["vs_transformers_serial"] = round(row["chunks_per_s"] / serial, 3)
        result["kinds"][kind] = {"in_process_ms": phases, "served": served,
                                 "transformers_serial_chunks_per_s": round(serial, 3)}  # fmt: skip
        print(f"gpu pi: {kind}: {result['kinds'][kind]}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "gpu-pi.json", result)
    _plot(out / "gpu-pi.png", result)
    return result


def _plot(path: Path, result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for kind, data in result["kinds"].items():
        served = data["served"]
        axes[0].plot([r["robots"] for r in served], [r["chunk_p50_ms"] for r in served], "o-",
                     label=f"{kind} node")  # fmt: skip
        axes[0].axhline(data["in_process_ms"]["transformers"]["total"], ls="--", lw=0.8,
                        label=f"{kind} transformers, 1 robot")  # fmt: skip
        axes[1].plot([r["robots"] for r in served], [r["chunks_per_s"] for r in served], "o-",
                     label=f"{kind} node")  # fmt: skip
        axes[1].axhline(data["transformers_serial_chunks_per_s"], ls="--", lw=0.8,
                        label=f"{kind} transformers, serial")  # fmt: skip
    axes[0].set(xlabel="robots", ylabel="time to chunk P50 [ms]")
    axes[1].set(xlabel="robots", ylabel="chunks / s")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"pi family, {result['size']} size, {result['device']}, {result['dtype']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
