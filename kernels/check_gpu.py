"""GPU check of the Triton kernels: ``python -m vla_kernels.check_gpu``.

Prints one table: for each kernel and realistic shape (7B-class heads: 32 q / 8 kv heads,
head_dim 128), the max error against the plain-torch reference, the kernel's time, the torch
baselines' times and the speedups; then the served inter-token latency (ITL) with each attention
backend next to the memory-bandwidth bound (weight bytes / measured HBM bandwidth). Exits 1 if a
kernel is wrong, 0 otherwise; on a machine without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vla_kernels.gpu_cases import CheckPlan, Row, decode_rows, extend_rows, norm_and_rotary_rows
from vla_kernels.launch_utils import triton_available

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class ServedItl:
    """What the ITL hook reports for one attention backend on the ~1B random-weight model."""

    p50_ms: float
    p99_ms: float
    weight_bytes: int
    model: str = ""


def measure_served_itl(attention_backend: str) -> ServedItl | None:
    """Hook: serve a ~1B-parameter random-weight model with ``--attention-backend
    attention_backend`` on this GPU, stream a few hundred greedy tokens for a handful of requests,
    and return the ITL percentiles and the model's weight bytes. Returns None until wired."""
    return None


def cuda_bench(fn: Callable[[], object]) -> float:
    """Median microseconds per call (triton.testing.do_bench, after warm-up)."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0


def hbm_bandwidth_bytes_per_s(device: torch.device, bench=cuda_bench) -> float:
    """Achieved device-to-device copy bandwidth (a copy reads and writes every byte)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = bench(lambda: dst.copy_(src)) * 1e-6
    return 2 * src.numel() / seconds


def itl_rows(bandwidth: float, probe=measure_served_itl) -> list[Row]:
    rows = []
    for backend in ("torch", "triton"):
        itl = probe(backend)
        if itl is None:
            rows.append(Row("served ITL", backend, None, None, None, None, note="hook not wired"))
            continue
        bound_ms = itl.weight_bytes / bandwidth * 1e3
        note = (
            f"{itl.model} p50 {itl.p50_ms:.2f} ms, p99 {itl.p99_ms:.2f} ms, bandwidth bound "
            f"{bound_ms:.2f} ms ({itl.weight_bytes / 1e9:.2f} GB at {bandwidth / 1e12:.2f} TB/s), "
            f"p50/bound {itl.p50_ms / bound_ms:.2f}x"
        )
        rows.append(Row("served ITL", backend, None, None, None, None, note=note))
    return rows


def run_checks(plan: CheckPlan, device: torch.device, bench=cuda_bench) -> list[Row]:
    return [
        *decode_rows(plan, device, bench),
        *extend_rows(plan, device, bench),
        *norm_and_rotary_rows(plan, device, bench),
    ]


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
    parser = argparse.ArgumentParser(prog="python -m vla_kernels.check_gpu", description=__doc__)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("vla_kernels.check_gpu: no CUDA device on this machine; nothing to check "
              "(the kernels are tested on CPU through the Triton interpreter).")  # fmt: skip
        return 0
    if not triton_available():
        print("vla_kernels.check_gpu: Triton is not installed (pip install triton==3.7.1).")
        return 1
    device = torch.device("cuda")
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, dtype {args.dtype}")
    rows = run_checks(CheckPlan(dtype=DTYPES[args.dtype]), device)
    rows += itl_rows(hbm_bandwidth_bytes_per_s(device))
    print(format_table(rows))
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
