"""GPU check: the Triton kernels, the served ITL against the memory-bandwidth bound, the pi family.

    python -m vla_server.bench gpu [--dtype bf16] [--served-itl-model 1b|tiny|none]
                                   [--pi-size real|mid|tiny|none] [--out bench_out/gpu]

Prints one table: the Triton kernel checks of ``python -m vla_kernels.check_gpu`` (error against
the torch references, times against the torch baselines), then the served inter-token latency
(ITL) of a real node on a ~1B-parameter random-weight Llama with each attention backend at batch
1 and 8 (see served_itl), next to the memory-bandwidth bound (weight bytes / measured HBM
bandwidth), then the pi section (`policies/pi_common/bench/gpu_section.py`: the pi family's
real-size flow policies in bf16, node against transformers, 1/4/8 robots; `gpu-pi.json` and
`gpu-pi.png` under `--out`). Exits 1 if a kernel
is wrong or a node fails. On a machine without CUDA it says so and exits 0, unless
``--served-itl-model tiny`` or ``--pi-size tiny|mid`` asks for a CPU run (development of the
measurement itself).
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

from vla_kernels.check_gpu import (
    DTYPES,
    NO_TRITON,
    cuda_bench,
    cuda_kernel_rows,
    failed,
    format_table,
)
from vla_kernels.gpu_cases import Row
from vla_kernels.launch_utils import triton_available
from vla_server.bench.itl_checkpoint import SHAPES, build_checkpoint
from vla_server.bench.served_itl import ItlPlan, ServedItl, measure_served_itl

ItlProbe = Callable[[str], list[ServedItl]]


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


def _batches(text: str) -> tuple[int, ...]:
    return tuple(int(b) for b in text.split(","))


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="of the kernel checks")
    p.add_argument(
        "--served-itl-model", choices=[*SHAPES, "none"], default="1b",
        help="random-weight model for the served ITL; 'tiny' also runs on a CPU (development)",
    )  # fmt: skip
    p.add_argument(
        "--served-itl-tokens", type=int, default=None,
        help="greedy tokens per stream (default: 256, or 16 for the tiny model)",
    )  # fmt: skip
    p.add_argument("--served-itl-batches", type=_batches, default=(1, 8), metavar="1,8")
    p.add_argument(
        "--pi-size", choices=["real", "mid", "tiny", "none"], default="real",
        help="the pi section's random-weight policies ('tiny' and 'mid' also run on a CPU)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("bench_out/gpu"))


def _itl_plan(args: argparse.Namespace, device: str) -> ItlPlan:
    tokens = args.served_itl_tokens or (16 if args.served_itl_model == "tiny" else 256)
    prompt = 16 if args.served_itl_model == "tiny" else 128
    return ItlPlan(args.served_itl_batches, tokens, prompt, device)


def collect_rows(args: argparse.Namespace) -> list[Row]:
    """The kernel checks (CUDA only) and then the served ITL, as one table's rows."""
    cuda = torch.cuda.is_available()
    if not cuda:
        print("vla_server.bench gpu: no CUDA device on this machine; nothing to check "
              "(the kernels are tested on CPU through the Triton interpreter).")  # fmt: skip
        if args.served_itl_model != "tiny":
            return []
        print("Served ITL of the tiny model on the CPU (Triton through the interpreter):")
    elif not triton_available():
        sys.exit(f"vla_server.bench gpu: {NO_TRITON}")
    rows = cuda_kernel_rows(args.dtype) if cuda else []
    if args.served_itl_model != "none":
        rows += served_itl_rows(args.served_itl_model, _itl_plan(args, "cuda" if cuda else "cpu"))
    return rows


def run(args: argparse.Namespace) -> list[Row]:
    rows = collect_rows(args)
    if rows:
        print(format_table(rows))
    cuda = torch.cuda.is_available()
    if args.pi_size != "none" and (cuda or args.pi_size != "real"):
        from vla_server.policies.pi_common.bench.gpu_section import pi_section

        pi_section(args.pi_size, "cuda" if cuda else "cpu", out=args.out)
    if failed(rows):
        sys.exit(1)
    return rows
