"""What two model lanes cost each other on this machine, with no server in the way.

The decode step of one request, alone and while another process decodes `rows` requests (the
background lane's kind of work), measured in this process. Two processes share no interpreter
lock, so the ratio is what the cores, caches and memory bandwidth alone take: the floor under the
protected robot's inter-token latency while the background lane computes. A server can only add
to it.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import torch

from vla_harness.stats import summary_ms
from vla_server.bench.raw_step import DecodeRig, measure_decode_steps

ROUND_STEPS = 32  # the neighbour's decode steps between fresh prompts (its context stays short)
STARTUP_S = 120.0  # bound on the neighbour's start (loading the model), not a measurement


def measure(model_path: Path, rows: int, steps: int, threads: int) -> dict[str, Any]:
    alone = summary_ms(measure_decode_steps(model_path, 1, steps))
    ctx = multiprocessing.get_context("spawn")
    stop, decoding = ctx.Event(), ctx.Event()
    neighbour = ctx.Process(
        target=_decode_until, args=(model_path, rows, threads, stop, decoding), daemon=True
    )
    neighbour.start()
    try:
        if not decoding.wait(STARTUP_S):
            raise RuntimeError("the decoding neighbour did not start")
        beside = summary_ms(measure_decode_steps(model_path, 1, steps))
    finally:
        stop.set()
        neighbour.join(30)
    floor = {
        "neighbour_rows": rows,
        "alone_ms": alone,
        "beside_ms": beside,
        "ratio_p50": beside["p50"] / alone["p50"],
        "ratio_p99": beside["p99"] / alone["p99"],
    }
    print(
        f"decode step beside a process decoding {rows} rows (no server): "
        f"P50 {floor['ratio_p50']:.2f}x, P99 {floor['ratio_p99']:.2f}x alone"
    )
    return floor


def _decode_until(model_path: Path, rows: int, threads: int, stop: Any, decoding: Any) -> None:
    """Decodes `rows` requests until told to stop: the model loaded once (reloading it between
    rounds made the floor the cost of a neighbour reading a checkpoint, not of one decoding)."""
    torch.set_num_threads(threads)
    rig = DecodeRig(model_path, rows, ROUND_STEPS + 2)
    while not stop.is_set():
        rig.round(ROUND_STEPS)
        decoding.set()
