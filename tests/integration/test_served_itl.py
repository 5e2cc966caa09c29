"""The served-ITL measurement end to end on a CPU: a real node on the tiny random-weight Llama
(torch backend), streams at batch 1 and 2, and nothing left running afterwards."""

from __future__ import annotations

import psutil
import pytest

from vla_server.bench.itl_checkpoint import SHAPES, build_checkpoint
from vla_server.bench.served_itl import ItlPlan, measure_served_itl

PLAN = ItlPlan(batches=(1, 2), new_tokens=6, prompt_tokens=5, device="cpu")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_checkpoint(SHAPES["tiny"], tmp_path_factory.mktemp("itl") / "model")


def _processes_serving(path: object) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if str(path) in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def test_measures_every_batch_and_tears_the_node_down(checkpoint, tmp_path):
    results = measure_served_itl("torch", checkpoint, PLAN, log_dir=tmp_path)
    assert [r.batch for r in results] == [1, 2]
    for r in results:
        # Each stream's first chunk carries the prefill's token; the rest are decode intervals
        # (fewer when the stream coalesced chunks).
        assert 0 < r.intervals <= r.batch * (PLAN.new_tokens - 1)
        assert 0 < r.p50_ms <= r.p99_ms and r.mean_ms > 0
        assert r.weight_bytes == checkpoint.weight_bytes and r.model == "llama-tiny fp32"
    assert (tmp_path / "server-torch.log").exists()
    assert _processes_serving(checkpoint.path) == []


def test_a_node_that_fails_to_start_is_reported_with_its_log(checkpoint, tmp_path):
    with pytest.raises(RuntimeError, match=r"exited with 2(.|\n)*node log: .*server-nope\.log"):
        measure_served_itl("nope", checkpoint, PLAN, log_dir=tmp_path)
    assert "invalid choice: 'nope'" in (tmp_path / "server-nope.log").read_text()
    assert _processes_serving(checkpoint.path) == []
