"""Served inter-token latency (ITL): a real ``vla-server serve`` node on a random-weight Llama,
greedy streams at batch 1 and 8, ITL percentiles from the arrival times of the stream chunks.

The node runs in its own process group on a free loopback port and is always torn down. A
chunk that carries n tokens (the stream may coalesce) counts as n intervals of gap / n.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_harness.server_subprocess import running_server
from vla_server.bench.itl_checkpoint import ItlCheckpoint
from vla_server.bench.stream_client import StreamTiming, concurrent_streams

START_TIMEOUT_S = 600.0
STOP_GRACE_S = 30.0


@dataclass
class ServedItl:
    """ITL of one attention backend at one batch size on the random-weight model."""

    p50_ms: float
    p99_ms: float
    weight_bytes: int
    model: str = ""
    batch: int = 1
    intervals: int = 0  # inter-token intervals behind the percentiles
    # Decode time / tokens: unlike the percentiles, unmoved by how the stream groups tokens.
    mean_ms: float | None = None


@dataclass(frozen=True)
class ItlPlan:
    batches: tuple[int, ...] = (1, 8)
    new_tokens: int = 256
    prompt_tokens: int = 128
    device: str = "cuda"


def measure_served_itl(
    attention_backend: str, checkpoint: ItlCheckpoint, plan: ItlPlan = ItlPlan(),
    log_dir: Path | None = None,
) -> list[ServedItl]:  # fmt: skip
    """Serve `checkpoint` with `--attention-backend attention_backend` and measure each batch."""
    interpret = plan.device == "cpu" and attention_backend == "triton"
    env = {"TRITON_INTERPRET": "1"} if interpret else {}
    log_path = (log_dir or checkpoint.path.parent) / f"server-{attention_backend}.log"
    try:
        with running_server(
            checkpoint.path, extra=_serve_args(attention_backend, checkpoint, plan),
            log_path=log_path, env=env, start_timeout_s=START_TIMEOUT_S, stop_grace_s=STOP_GRACE_S,
        ) as server:  # fmt: skip
            return [_measure_batch(server.url, batch, checkpoint, plan) for batch in plan.batches]
    except Exception as e:
        raise RuntimeError(f"{e} (node log: {log_path})") from e


def _measure_batch(url: str, batch: int, checkpoint: ItlCheckpoint, plan: ItlPlan) -> ServedItl:
    # An untimed identical round first: Triton compiles a kernel for each specialisation it
    # meets (the split-K count grows with the context), and no compile may land in the timing.
    bodies = [_request(checkpoint, plan, seed) for seed in range(batch)]
    for _ in range(2):
        streams = asyncio.run(concurrent_streams(url, bodies))
        for timing in streams:
            _check_complete(timing, plan.new_tokens)
    gaps = [gap for timing in streams for gap in timing.itls]
    gaps_ms = np.array(gaps) * 1e3
    p50, p99 = np.percentile(gaps_ms, [50, 99])
    return ServedItl(
        float(p50), float(p99), checkpoint.weight_bytes, checkpoint.shape.label, batch,
        len(gaps), float(gaps_ms.mean()),
    )  # fmt: skip


def _serve_args(backend: str, checkpoint: ItlCheckpoint, plan: ItlPlan) -> list[str]:
    per_request = plan.prompt_tokens + plan.new_tokens
    dtype = str(checkpoint.shape.dtype).removeprefix("torch.")
    return [
        "--device", plan.device, "--dtype", dtype,
        "--attention-backend", backend, "--max-running-requests", str(max(plan.batches)),
        "--max-total-tokens", str(max(plan.batches) * per_request + 64), "--log-level", "warning",
    ]  # fmt: skip


def _request(checkpoint: ItlCheckpoint, plan: ItlPlan, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    # Ids past the special tokens, so no prompt token is an end of sequence.
    prompt = [rng.randrange(8, checkpoint.shape.vocab) for _ in range(plan.prompt_tokens)]
    sampling = {"max_new_tokens": plan.new_tokens, "temperature": 0, "ignore_eos": True}
    return {"input_ids": prompt, "sampling_params": sampling}


def _check_complete(timing: StreamTiming, new_tokens: int) -> None:
    finish = ((timing.last or {}).get("meta_info") or {}).get("finish_reason") or {}
    if finish.get("type") == "abort":
        raise RuntimeError(f"the server aborted the stream: {finish}")
    if timing.tokens != new_tokens:
        raise RuntimeError(f"the stream carried {timing.tokens} tokens, {new_tokens} were asked")
