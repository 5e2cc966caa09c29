"""Scheduler benchmarks: overlap, priority, chunked prefill, sessions (or all four).

    python -m vla_server.bench scheduler {overlap,priority,chunked,session,all} [--model medium]

Each writes a table, a JSON file and a CDF plot under --out; every ratio is measured within one
run (never absolute times across runs).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from vla_server.bench.scheduler_common import add_common_args

SUBCOMMANDS = {
    "overlap": "vla_server.bench.scheduler_overlap",
    "priority": "vla_server.bench.scheduler_priority",
    "chunked": "vla_server.bench.scheduler_chunked",
    "session": "vla_server.bench.scheduler_session",
}


def _parser_of(module: Any) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    module.add_args(p)
    return p


def add_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="scheduler_bench", required=True)
    for name, module in SUBCOMMANDS.items():
        mod = importlib.import_module(module)
        mod.add_args(sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0]))
    add_common_args(sub.add_parser("all", help="the four in turn, each with its defaults"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.scheduler_bench != "all":
        return importlib.import_module(SUBCOMMANDS[args.scheduler_bench]).run(args)
    common = vars(args)
    results = {}
    for name, module in SUBCOMMANDS.items():
        mod = importlib.import_module(module)
        ns = _parser_of(mod).parse_args([])
        vars(ns).update({k: v for k, v in common.items() if k in vars(ns)})
        print(f"\n===== scheduler {name} =====", flush=True)
        results[name] = mod.run(ns)
    return results
