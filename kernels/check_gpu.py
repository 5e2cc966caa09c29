"""GPU check of the Triton kernels: ``python -m vla_kernels.check_gpu``.

Prints one table: for each kernel and realistic shape (7B-class heads: 32 q / 8 kv heads,
head_dim 128), the max error against the plain-torch reference, the kernel's time, the torch
baselines' times and the speedups; then the served inter-token latency (ITL) of a real node on a
~1B-parameter random-weight Llama with each attention backend at batch 1 and 8 (see
vla_kernels.served_itl), next to the memory-bandwidth bound (weight bytes / measured HBM
bandwidth). Exits 1 if a kernel is wrong or a node fails, 0 otherwise; on a machine without CUDA
it says so and exits 0, unless ``--served-itl-model tiny`` asks for the ITL measurement of a tiny
model on the CPU (development of the measurement itself).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from vla_kernels.gpu_cases import CheckPlan, Row, decode_rows, extend_rows, norm_and_rotary_rows
from vla_kernels.itl_checkpoint import SHAPES, build_checkpoint
from vla_kernels.launch_utils import triton_available
from vla_kernels.served_itl import ItlPlan, ServedItl, measure_served_itl

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def cuda_bench(fn: Callable[[], object]) -> float:
    """Median microseconds per call (triton.testing.do_bench, after warm-up)."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0


def cpu_bench(fn: Callable[[], object], reps: int = 5) -> float:
    """Median microseconds per call on the host, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def hbm_bandwidth_bytes_per_s(
    device: torch.device, bench=cuda_bench, nbytes: int = 1 << 30
) -> float:
    """Achieved device-to-device copy bandwidth (a copy reads and writes every byte)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = bench(lambda: dst.copy_(src)) * 1e-6
    return 2 * src.numel() / seconds


ItlProbe = Callable[[str], list[ServedItl]]


def itl_rows(bandwidth: float, probe: ItlProbe, backends=("torch", "triton")) -> list[Row]:
    """One row per backend and batch size: ITL next to the bound weight bytes / bandwidth (a
    decode step reads every weight once, whatever the batch). A node that fails is a NO row."""
    rows = []
    for backend in backends:
        try:
            result = probe(backend)
        except Exception as e:  # the table still shows the other backend and the kernels
            print(f"served ITL with {backend}: {e}", file=sys.stderr)
            first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
            rows.append(Row("served ITL", backend, None, False, None, None, note=first_line))
            continue
        for itl in result:
            shape, note = f"{backend}, batch {itl.batch}", _itl_note(itl, bandwidth)
            rows.append(Row("served ITL", shape, None, None, None, None, note=note))
    return rows


def _itl_note(itl: ServedItl, bandwidth: float) -> str:
    bound_ms = itl.weight_bytes / bandwidth * 1e3
    mean = "" if itl.mean_ms is None else f", mean {itl.mean_ms:.2f} ms"
    return (
        f"{itl.model} p50 {itl.p50_ms:.2f} ms, p99 {itl.p99_ms:.2f} ms{mean}, bandwidth bound "
        f"{bound_ms:.2f} ms ({itl.weight_bytes / 1e9:.2f} GB at {bandwidth / 1e9:.0f} GB/s), "
        f"p50/bound {itl.p50_ms / bound_ms:.2f}x"
    )


def served_itl_rows(model: str, plan: ItlPlan) -> list[Row]:
    """Build the random-weight checkpoint once, then serve it with each attention backend."""
    device = torch.device(plan.device)
    bench = cuda_bench if device.type == "cuda" else cpu_bench
    bandwidth = hbm_bandwidth_bytes_per_s(device, bench, 1 << (30 if device.type == "cuda" else 28))
    log_dir = Path(tempfile.mkdtemp(prefix="vla-itl-logs-"))
    with tempfile.TemporaryDirectory(prefix="vla-itl-") as tmp:
        checkpoint = build_checkpoint(SHAPES[model], Path(tmp) / "model", device)
        probe = functools.partial(
            measure_served_itl, checkpoint=checkpoint, plan=plan, log_dir=log_dir
        )
        rows = itl_rows(bandwidth, probe)
    print(f"served ITL: node logs in {log_dir}")
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


def _batches(text: str) -> tuple[int, ...]:
    return tuple(int(b) for b in text.split(","))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m vla_kernels.check_gpu", description=__doc__)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument(
        "--served-itl-model", choices=[*SHAPES, "none"], default="1b",
        help="random-weight model for the served ITL; 'tiny' also runs on a CPU (development)",
    )  # fmt: skip
    parser.add_argument(
        "--served-itl-tokens", type=int, default=None,
        help="greedy tokens per stream (default: 256, or 16 for the tiny model)",
    )  # fmt: skip
    parser.add_argument("--served-itl-batches", type=_batches, default=(1, 8), metavar="1,8")
    return parser.parse_args(argv)


def _itl_plan(args: argparse.Namespace, device: str) -> ItlPlan:
    tokens = args.served_itl_tokens or (16 if args.served_itl_model == "tiny" else 256)
    prompt = 16 if args.served_itl_model == "tiny" else 128
    return ItlPlan(args.served_itl_batches, tokens, prompt, device)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if not torch.cuda.is_available():
        print("vla_kernels.check_gpu: no CUDA device on this machine; nothing to check "
              "(the kernels are tested on CPU through the Triton interpreter).")  # fmt: skip
        if args.served_itl_model != "tiny":
            return 0
        print("Served ITL of the tiny model on the CPU (Triton through the interpreter):")
        rows = served_itl_rows("tiny", _itl_plan(args, "cpu"))
        print(format_table(rows))
        return 1 if any(r.ok is False for r in rows) else 0
    if not triton_available():
        print("vla_kernels.check_gpu: Triton is not installed (pip install triton==3.7.1).")
        return 1
    device = torch.device("cuda")
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, dtype {args.dtype}")
    rows = run_checks(CheckPlan(dtype=DTYPES[args.dtype]), device)
    if args.served_itl_model != "none":
        rows += served_itl_rows(args.served_itl_model, _itl_plan(args, "cuda"))
    print(format_table(rows))
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
