"""`python -m vla_server.bench pi` on the tiny folders: what it reports, not how fast anything
was. The node's chunk equals transformers' own `PI0ForConditionalGeneration` /
`PI05ForConditionalGeneration` on the same observation (the bench times the same computation),
every phase and served chunk is timed, the closed-loop robots share action-head passes, and the
JSON, plots and operator profile are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench_cli import bench_args
from vla_server.policies.pi_common.bench import cli as pi


@pytest.mark.usefixtures("one_torch_thread")
def test_a_short_run_reports_phases_served_chunks_and_the_profile(monkeypatch, tmp_path: Path):
    args = bench_args(
        monkeypatch, pi, "pi", "--size", "tiny", "--threads", "1", "--repeats", "2",
        "--rounds", "1", "--chunks", "2", "--robots", "2", "--no-lerobot", "--out", str(tmp_path),
    )  # fmt: skip
    monkeypatch.undo()
    pi.run(args)
    result = json.loads((tmp_path / "pi.json").read_text())
    assert [p["kind"] for p in result["phases"]] == ["pi0", "pi05"]
    for phases in result["phases"]:
        timed = phases["by_threads"]["1"]
        assert timed["max_chunk_difference"] < 1e-5
        assert [r["phase"] for r in timed["rows"]] == ["vision", "prefix", "denoise", "total"]
        assert all(r["node_ms"] > 0 and r["transformers_ms"] > 0 for r in timed["rows"])
        assert set(phases["top_operators"]) == {"node", "transformers"}
        batched = phases["batched_pass"]
        assert batched["rows"] == 8 and batched["pass_ms_batched"] > 0 < batched["pass_ms_one"]
        assert batched["top_operators"]
    assert [s["kind"] for s in result["served"]] == ["pi0", "pi05", "pi0fast"]
    for served in result["served"]:
        assert len(served["node_s"]) == 2 and len(served["reference_s"]["1"]) == 2
    for served in result["served"][:2]:
        (fleet,) = served["fleet"]
        assert fleet["node_chunks_per_s"] > 0 and fleet["rows_per_pass"] >= 1
    for name in ("pi-phases.png", "pi-served.png", "pi-top-ops.md"):
        assert (tmp_path / name).stat().st_size > 0
