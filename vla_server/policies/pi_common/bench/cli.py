"""The pi family's speed against the references, on mid-size folders where compute shows.

    python -m vla_server.bench pi [--sections phases served fast] [--kinds pi0 pi05]
                                  [--threads 1 2] [--repeats 11] [--rounds 3] [--chunks 5]
                                  [--robots 8] [--out bench_out/pi]

Builds the mid-size pi0, pi0.5 and pi0-FAST folders (`paligemma_dims.MID`: two 224 px cameras
= 512 image tokens, SigLIP 4 x 256, Gemma 6 x 512 with one KV head, expert 6 x 256, chunks of
50, 10 steps) deterministically on first use, then, at each torch thread count:

* phases: the node's model path against transformers' `PI0ForConditionalGeneration` /
  `PI05ForConditionalGeneration` phase by phase in this one process, and each phase's top
  operators under `torch.profiler` (`phases.py`);
* served: `/v1/actions` with new JPEG frames, one robot, against `sample_actions` in process
  and LeRobot 0.6.1's `predict_action_chunk` (in its own venv, `lerobot_reference.py`), then
  8 robots in closed loops against the serial reference (`served.py`);
* fast: pi0-FAST served against PaliGemma `generate` of as many tokens.

Writes `pi.json`, `pi-phases.png`, `pi-served.png` and `pi-top-ops.md` under `--out`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from vla_harness.stats import write_json
from vla_server.policies.pi_common.bench.report import report

KINDS = ("pi0", "pi05")
SECTIONS = ("phases", "served", "fast")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument(
        "--size", choices=("mid", "tiny"), default="mid",
        help="the folders' size ('tiny': the tests' models, to develop the bench)",
    )  # fmt: skip
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="torch thread counts (default: 1 and every core)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=11, help="phases: timed observations")
    p.add_argument("--rounds", type=int, default=3, help="served: rounds of node, reference")
    p.add_argument("--chunks", type=int, default=5, help="served: chunks per round")
    p.add_argument("--robots", type=int, default=8, help="served: robots of the closed loops")
    p.add_argument(
        "--no-lerobot", dest="lerobot", action="store_false",
        help="served: skip LeRobot's policy (its venv is built on first use)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("bench_out/pi"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vla_server.policies.pi_common.bench.phases import run_kind
    from vla_server.policies.pi_common.bench.served import fast_served, flow_served

    threads = args.threads or sorted({1, os.cpu_count() or 1})
    result: dict[str, Any] = {"size": args.size, "threads": threads, "phases": [], "served": []}
    for kind in args.kinds:
        print(f"{kind}: the {args.size} folder (built on first use) ...", flush=True)
        folder = _folder(kind, args.size)
        if "phases" in args.sections:
            result["phases"].append(run_kind(kind, folder, threads, args.repeats))
        if "served" in args.sections:
            served = flow_served(
                kind, folder, args.rounds, args.chunks, threads, args.robots, args.lerobot
            )
            result["served"].append(served)
    if "fast" in args.sections:
        print(f"pi0fast: the {args.size} folder (built on first use) ...", flush=True)
        folder = _folder("pi0fast", args.size)
        result["served"].append(fast_served(folder, args.rounds, args.chunks, threads))
    report(args.out, result)
    write_json(args.out / "pi.json", result)
    print(f"wrote {args.out}/pi.json and its plots")
    return result


def _folder(kind: str, size: str) -> Path:
    from vla_server.policies.pi0.tiny import sized_pi0_model_path
    from vla_server.policies.pi0fast.tiny import mid_pi0fast_model_path, pi0fast_model_path

    if kind == "pi0fast":
        return mid_pi0fast_model_path() if size == "mid" else pi0fast_model_path()
    return sized_pi0_model_path(kind, size)
