"""`python -m vla_server.bench gpu` off a GPU: the served-ITL rows against the bandwidth bound,
and the no-CUDA exit. (The served ITL of a real node is in tests/integration/test_served_itl.py.)"""

from __future__ import annotations

import argparse

import pytest
import torch

from vla_kernels.check_gpu import format_table
from vla_server.bench import gpu
from vla_server.bench.served_itl import ServedItl


def test_itl_rows_compare_with_the_bandwidth_bound():
    def probe(backend: str) -> list[ServedItl]:
        if backend == "torch":
            raise RuntimeError("the node exited with 1:\nTraceback ...")
        return [
            ServedItl(p50_ms=1.0, p99_ms=1.5, weight_bytes=2_000_000_000, batch=b, mean_ms=1.2)
            for b in (1, 8)
        ]

    torch_row, *triton_rows = gpu.itl_rows(4e12, probe)
    assert torch_row.ok is False and torch_row.note == "the node exited with 1:"
    assert [r.shape for r in triton_rows] == ["triton, batch 1", "triton, batch 8"]
    # 2 GB at 4 TB/s: 0.5 ms per token at best, whatever the batch.
    for row in triton_rows:
        assert "bandwidth bound 0.50 ms" in row.note and "p50/bound 2.00x" in row.note
    table = format_table([torch_row, *triton_rows])
    assert "served ITL" in table and "p99 1.50 ms, mean 1.20 ms" in table


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    gpu.add_args(parser)
    return parser.parse_args(list(argv))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_without_cuda_it_says_so_and_measures_nothing(capsys):
    assert gpu.run(_args()) == []
    assert "no CUDA device" in capsys.readouterr().out


def test_arguments():
    args = _args("--served-itl-model", "tiny", "--served-itl-batches", "1,2,4")
    assert args.served_itl_batches == (1, 2, 4) and args.dtype == "bf16"


@pytest.mark.usefixtures("one_torch_thread")
def test_the_pi_section_runs_on_the_cpu_with_the_tiny_folders(tmp_path):
    """Everything but CUDA: the tiny pi0 and pi0.5 through both paths (equal chunks in float32),
    served to 1 and 2 robots, the serial reference, the JSON and the plot."""
    from vla_server.policies.pi_common.bench.gpu_section import CUDA_GRAPHS, pi_section

    result = pi_section("tiny", "cpu", robots=(1, 2), chunks=2, out=tmp_path)
    assert result["cuda_graphs"] == CUDA_GRAPHS and set(result["kinds"]) == {"pi0", "pi05"}
    for data in result["kinds"].values():
        timed = data["in_process_ms"]
        assert timed["max_chunk_difference"] < 1e-5
        assert all(timed[path]["total"] > 0 for path in ("node", "transformers"))
        assert [r["robots"] for r in data["served"]] == [1, 2]
        assert all(r["chunks_per_s"] > 0 and r["rows_per_pass"] >= 1 for r in data["served"])
    assert (tmp_path / "gpu-pi.json").exists() and (tmp_path / "gpu-pi.png").stat().st_size > 0
