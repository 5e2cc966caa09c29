"""The pi family's speed against the references, on mid-size folders where compute shows.

    python -m vla_server.bench pi [--kinds pi0 pi05] [--threads 1 2] [--repeats 7]
                                  [--out bench_out/pi]

Builds the mid-size pi0 and pi0.5 folders (`paligemma_dims.MID`: two 224 px cameras = 512
image tokens, SigLIP 4 x 256, Gemma 6 x 512 with one KV head, expert 6 x 256, chunks of 50,
10 steps) deterministically on first use, then per kind and torch thread count times the
node's model path against transformers' `PI0ForConditionalGeneration` /
`PI05ForConditionalGeneration` phase by phase in this one process (`pi_phases.py`), and
profiles each phase. Writes `pi.json`, `pi-phases.png` and `pi-top-ops.md` under `--out`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from vla_harness.stats import write_json
from vla_server.bench.pi_phases import run_kind
from vla_server.bench.pi_report import plot_phases, print_phases, profile_markdown

KINDS = ("pi0", "pi05")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="torch thread counts (default: 1 and every core)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=7, help="timed observations per thread count")
    p.add_argument("--out", type=Path, default=Path("bench_out/pi"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vla_server.policies.pi0.tiny import mid_pi0_model_path

    threads = args.threads or sorted({1, os.cpu_count() or 1})
    results = []
    for kind in args.kinds:
        print(f"{kind}: the mid-size folder (built on first use) ...", flush=True)
        results.append(run_kind(kind, mid_pi0_model_path(kind), threads, args.repeats))
        print_phases(results[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "pi.json", {"phases": results})
    plot_phases(args.out / "pi-phases.png", results)
    (args.out / "pi-top-ops.md").write_text(profile_markdown(results))
    print(f"wrote {args.out}/pi.json, pi-phases.png, pi-top-ops.md")
    return {"phases": results}
