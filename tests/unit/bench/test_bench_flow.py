"""`python -m vla_server.bench flow`: any family's tiny checkpoint by name, and a short run.

The run starts a real node and checks what the benchmark reports, not how fast anything was:
every chunk arrived whole, the node's counters show several robots sharing action-head passes,
its phase clocks account for the model's time, and the JSON and PNG are written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from vla_server.bench import __main__ as bench_main
from vla_server.bench import flow
from vla_server.policies.registry import DEFAULT_DENOISING_TINY, tiny_checkpoints


def parse(monkeypatch: pytest.MonkeyPatch, *argv: str) -> argparse.Namespace:
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(flow, "run", seen.append)
    monkeypatch.setattr(sys, "argv", ["python -m vla_server.bench", "flow", *argv])
    bench_main.main()
    (args,) = seen
    return args


def test_tiny_names_come_from_the_families(monkeypatch: pytest.MonkeyPatch):
    assert parse(monkeypatch).tiny == DEFAULT_DENOISING_TINY in tiny_checkpoints()
    with pytest.raises(SystemExit, match="known: .*demo"):
        flow._model_path(parse(monkeypatch, "--tiny", "no-such-policy"))


def test_a_token_policy_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    args = parse(monkeypatch, "--tiny", "demo", "--robots", "1", "--chunks", "1")
    monkeypatch.undo()
    with pytest.raises(SystemExit, match="no robot interface|not denoised"):
        flow.run(args)


def test_a_short_run_reports_chunks_passes_and_phases(monkeypatch, tmp_path: Path):
    args = parse(monkeypatch, "--robots", "1", "3", "--chunks", "2", "--out", str(tmp_path))
    monkeypatch.undo()
    result = flow.run(args)
    one, three = result["runs"]
    assert (one["chunks"], three["chunks"]) == (2, 6)
    # 10 Euler steps per chunk, one pass each alone; several robots' steps may share a pass.
    assert one["expert_passes"] == 20 and one["rows_per_pass"] == 1.0
    assert three["expert_passes"] <= 60
    assert three["rows_per_pass"] * three["expert_passes"] == pytest.approx(60)
    phases = {row["phase"]: row for row in result["phases"]}
    assert all(phases[p]["ms_per_chunk"] > 0 for p in flow.PHASES)
    assert sum(phases[p]["share_of_model"] for p in flow.PHASES) == pytest.approx(1.0, abs=0.01)
    assert json.loads((tmp_path / "flow.json").read_text()) == result
    assert (tmp_path / "flow.png").stat().st_size > 0
