"""`python -m vla_server.bench scheduler ...`: the command line reaches each benchmark with its
own defaults and the common options (no servers are started: each benchmark's run is replaced)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import pytest

from vla_server.bench import __main__ as bench_main
from vla_server.bench.scheduler import SUBCOMMANDS
from vla_server.bench.scheduler_common import BenchSetup, prompt_ids, save_report


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.Namespace]:
    calls: dict[str, argparse.Namespace] = {}
    for name, module in SUBCOMMANDS.items():
        mod = importlib.import_module(module)
        monkeypatch.setattr(mod, "run", lambda ns, name=name: calls.setdefault(name, ns))
    return calls


def main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["python -m vla_server.bench", *argv])
    bench_main.main()


def test_all_runs_each_benchmark_with_its_defaults_and_the_common_options(
    monkeypatch: pytest.MonkeyPatch, captured: dict[str, argparse.Namespace], tmp_path: Path
) -> None:
    main(monkeypatch, "scheduler", "all", "--model", "small", "--out", str(tmp_path))
    assert list(captured) == ["overlap", "priority", "chunked", "session"]
    for ns in captured.values():
        assert ns.model == "small"
        assert ns.out == tmp_path
    assert captured["overlap"].concurrency == [1, 8]
    assert captured["priority"].low_robots == 8
    assert captured["chunked"].chunk_sizes == [64, 0]
    assert captured["session"].turns == 5


def test_one_subcommand_gets_its_own_options(
    monkeypatch: pytest.MonkeyPatch, captured: dict[str, argparse.Namespace]
) -> None:
    main(monkeypatch, "scheduler", "chunked", "--chunk-sizes", "16", "0", "--prompt-tokens", "300")
    assert list(captured) == ["chunked"]
    assert captured["chunked"].chunk_sizes == [16, 0]
    assert captured["chunked"].prompt_tokens == 300
    assert captured["chunked"].model == "medium"


def test_prompts_of_different_seeds_share_no_prefix_and_repeat_per_seed() -> None:
    prompts = [prompt_ids(600, seed) for seed in range(50)]
    assert prompt_ids(600, 3) == prompts[3]
    firsts = [p[:2] for p in prompts]
    assert len(set(map(tuple, firsts))) == len(firsts)


def test_priority_workloads_take_their_defaults_and_the_options_on_top(
    monkeypatch: pytest.MonkeyPatch, captured: dict[str, argparse.Namespace]
) -> None:
    from vla_server.bench.scheduler_priority import workload

    main(monkeypatch, "scheduler", "priority", "--workload", "text", "--reps", "4")
    wl = workload(captured["priority"])
    assert (wl.name, wl.model, wl.high_prompt, wl.low_prompt) == ("text", "text45m", 61, 81)
    assert (wl.high_priority, wl.realtime_priority, wl.reserve_ms) == (10, 10, 10.0)
    assert not wl.lows_in_process and wl.text_prompts
    assert wl.reps == 4 and isinstance(wl.reps, int)
    assert captured["priority"].model is None  # the workload's model unless --model is given


def test_a_report_records_the_extra_serve_flags_its_servers_were_given(tmp_path: Path) -> None:
    flags = ["--realtime-background-lane", "off"]
    bench = BenchSetup(tmp_path / "model-x", 1, 1024, tmp_path, tmp_path, flags)
    rows = [{"case": "alone", "itl_p99": 1.0}]
    save_report(bench, "priority-text", "t", rows, {"workload": "text"}, {"alone": [1.0, 2.0]})
    record = json.loads((tmp_path / "priority-text-model-x.json").read_text())
    assert record["server_args"] == flags
    assert record["workload"] == "text" and record["rows"] == rows
