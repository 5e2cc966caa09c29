"""The GPU check script's code paths on CPU: tiny shapes through the Triton interpreter with a
stand-in timer (every kernel and baseline still runs once), and its no-CUDA exit."""

from __future__ import annotations

import pytest
import torch

from tests.support.kernel_testing import DEVICE
from vla_kernels.check_gpu import format_table, main, run_checks
from vla_kernels.gpu_cases import CheckPlan

pytest.importorskip("triton")

TINY = CheckPlan(
    dtype=torch.float16,
    q_heads=4,
    kv_heads=2,
    head_dim=64,
    decode_batches=(1, 3),
    decode_contexts=(9, 70),
    extend_cases=((1, 0, 9), (2, 13, 5)),
    prefix_lm_cases=((2, 0, 11),),
    norm_tokens=(1, 3),
    hidden=96,
)


def _run_once(fn) -> float:
    fn()
    return 2.0


def test_every_check_runs_and_agrees_with_its_reference():
    rows = run_checks(TINY, DEVICE, bench=_run_once)
    kinds = ["decode"] * 4 + ["extend"] * 2 + ["extend prefix-LM"] + ["add+rmsnorm", "rotary"] * 2
    assert [r.kernel for r in rows] == kinds
    assert all(r.ok for r in rows), format_table(rows)
    assert all(r.triton_us == 2.0 and r.torch_us == 2.0 for r in rows)
    assert all(r.torch_paged_us == 2.0 for r in rows if r.kernel.startswith(("decode", "extend")))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_without_cuda_it_says_so_and_exits_cleanly(capsys):
    assert main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out
