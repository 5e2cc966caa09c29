"""`python -m vla_server.bench <name> ...`: the benchmark scripts."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "serving": "vla_server.bench.serving",
    "multimodal": "vla_server.bench.multimodal",
    "scheduler": "vla_server.bench.scheduler",
    "bridge": "ros_bridge.bench_bridge",
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m vla_server.bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    for name, module in BENCHES.items():
        mod = importlib.import_module(module)
        mod.add_args(sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0]))
    args = parser.parse_args()
    importlib.import_module(BENCHES[args.bench]).run(args)


if __name__ == "__main__":
    main()
