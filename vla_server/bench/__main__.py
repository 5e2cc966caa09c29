"""`python -m vla_server.bench <name> ...`: the benchmark scripts."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys

BENCHES = {
    "serving": "vla_server.bench.serving",
    "multimodal": "vla_server.bench.multimodal",
    "scheduler": "vla_server.bench.scheduler",
    "gpu": "vla_server.bench.gpu",
    "fleet": "vla_server.bench.fleet",
    "ecosystem": "vla_server.bench.ecosystem",
    "sglang_action": "vla_server.bench.sglang_action_client",
    "soak": "vla_server.bench.soak",
    "control": "vla_server.bench.control",
    "flow": "vla_server.bench.flow",
    "pi": "vla_server.policies.pi_common.bench.cli",
    "lerobot-client": "vla_server.bench.lerobot_client",
}


def _summary(module: str) -> str:
    """The first docstring line of `module`, read from its source: importing every benchmark
    to list them would need every benchmark's dependencies."""
    origin = importlib.util.find_spec(module).origin  # type: ignore[union-attr]
    with open(origin, encoding="utf-8") as f:  # type: ignore[arg-type]
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return doc.splitlines()[0] if doc else ""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bridge":
        raise SystemExit("the bridge benchmark is `vla-bridge bench` now (the [ros] extra)")
    chosen = argv[0] if argv and argv[0] in BENCHES else None
    parser = argparse.ArgumentParser(prog="python -m vla_server.bench")
    sub = parser.add_subparsers(dest="bench", required=True)
    for name, module in BENCHES.items():
        sub_parser = sub.add_parser(name, help=_summary(module))
        if name == chosen:
            importlib.import_module(module).add_args(sub_parser)
    args = parser.parse_args(argv)
    importlib.import_module(BENCHES[args.bench]).run(args)


if __name__ == "__main__":
    main()
