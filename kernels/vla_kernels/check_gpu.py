"""GPU check of the Triton kernels: ``python -m vla_kernels.check_gpu [--dtype bf16]``.

Prints one table: for each kernel and realistic shape (7B-class heads: 32 q / 8 kv heads,
head_dim 128), the max error against the plain-torch reference, the kernel's time, the torch
baselines' times and the speedups. Exits 1 if a kernel is wrong, 0 otherwise; on a machine
without CUDA it says so and exits 0. The served inter-token latency of a real node with these
kernels is measured by ``python -m vla_server.bench gpu``, which prints this table too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

from vla_kernels.gpu_cases import CheckPlan, Row, decode_rows, extend_rows, norm_and_rotary_rows
from vla_kernels.launch_utils import triton_available

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PROG = "python -m vla_kernels.check_gpu"
NO_TRITON = "Triton is not installed (pip install triton==3.7.1)"


def cuda_bench(fn: Callable[[], object]) -> float:
    """Median microseconds per call (triton.testing.do_bench, after warm-up)."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0


def run_checks(plan: CheckPlan, device: torch.device, bench=cuda_bench) -> list[Row]:
    return [
        *decode_rows(plan, device, bench),
        *extend_rows(plan, device, bench),
        *norm_and_rotary_rows(plan, device, bench),
    ]


def cuda_kernel_rows(dtype: str) -> list[Row]:
    """Every kernel check on the CUDA device, after a line naming the device and versions."""
    device = torch.device("cuda")
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, dtype {dtype}")
    return run_checks(CheckPlan(dtype=DTYPES[dtype]), device)


def failed(rows: list[Row]) -> bool:
    return any(r.ok is False for r in rows)


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'kernel':<12} {'shape':<30} {'max_err':>9} {'ok':>3} {'triton_us':>10} "
        f"{'torch_us':>10} {'paged_us':>10} {'x torch':>8} {'x paged':>8}  note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = "" if r.ok is None else ("yes" if r.ok else "NO")
        lines.append(
            f"{r.kernel:<12} {r.shape:<30} {_num(r.max_err, '.1e'):>9} {ok:>3} "
            f"{_num(r.triton_us, '.1f'):>10} {_num(r.torch_us, '.1f'):>10} "
            f"{_num(r.torch_paged_us, '.1f'):>10} {_ratio(r.torch_us, r.triton_us):>8} "
            f"{_ratio(r.torch_paged_us, r.triton_us):>8}  {r.note}"
        )
    lines.append("x torch / x paged: baseline time / Triton time (above 1: Triton is faster).")
    lines.append("torch: dense SDPA on pre-gathered K/V, or eager torch; paged: gather + SDPA.")
    return "\n".join(lines)


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _ratio(baseline: float | None, triton_us: float | None) -> str:
    return "" if baseline is None or not triton_us else f"{baseline / triton_us:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{PROG}: no CUDA device on this machine; nothing to check "
              "(the kernels are tested on CPU through the Triton interpreter).")  # fmt: skip
        return 0
    if not triton_available():
        print(f"{PROG}: {NO_TRITON}")
        return 1
    rows = cuda_kernel_rows(args.dtype)
    print(format_table(rows))
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
