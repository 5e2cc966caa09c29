"""A `python -m vla_server.bench SUBCOMMAND ...` command line, parsed as the CLI parses it, with
the subcommand's `run` replaced so nothing runs: the namespace it would have been given."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

import pytest

from vla_server.bench import __main__ as bench_main


def bench_args(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, subcommand: str, *argv: str
) -> argparse.Namespace:
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(module, "run", seen.append)
    monkeypatch.setattr(sys, "argv", ["python -m vla_server.bench", subcommand, *argv])
    bench_main.main()
    (args,) = seen
    return args
