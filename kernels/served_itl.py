"""Served inter-token latency (ITL): a real ``vla-server serve`` node on a random-weight Llama,
greedy streams at batch 1 and 8, ITL percentiles from the arrival times of the stream chunks.

The node runs in its own process group on a free loopback port and is always torn down. A
chunk that carries n tokens (the stream may coalesce) counts as n intervals of gap / n.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from vla_kernels.itl_checkpoint import ItlCheckpoint
from vla_server.server_subprocess import running_server

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


def token_intervals(arrivals: list[tuple[float, int]]) -> list[float]:
    """Seconds per token between consecutive chunks of one stream, given (time, n_tokens).

    The first chunk (the prefill's token) only starts the clock: its gap is the TTFT."""
    out: list[float] = []
    for (t0, _), (t1, n) in zip(arrivals, arrivals[1:], strict=False):
        out += [(t1 - t0) / n] * n
    return out


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
    for _ in range(2):
        streams = asyncio.run(
            _stream_batch(url, batch, plan.prompt_tokens, plan.new_tokens, checkpoint)
        )
    gaps = [gap for arrivals in streams for gap in token_intervals(arrivals)]
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


def _prompt(checkpoint: ItlCheckpoint, length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    # Ids past the special tokens, so no prompt token is an end of sequence.
    return [rng.randrange(8, checkpoint.shape.vocab) for _ in range(length)]


async def _stream_batch(
    url: str, batch: int, prompt_tokens: int, new_tokens: int, checkpoint: ItlCheckpoint
) -> list[list[tuple[float, int]]]:
    async with httpx.AsyncClient(base_url=url, timeout=None) as client:
        streams = (
            _stream_one(client, _prompt(checkpoint, prompt_tokens, seed), new_tokens)
            for seed in range(batch)
        )
        return list(await asyncio.gather(*streams))


async def _stream_one(
    client: httpx.AsyncClient, input_ids: list[int], new_tokens: int
) -> list[tuple[float, int]]:
    body = {
        "input_ids": input_ids, "stream": True,
        "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True},
    }  # fmt: skip
    arrivals: list[tuple[float, int]] = []
    async with client.stream("POST", "/generate", json=body) as response:
        if response.status_code != 200:
            body_text = (await response.aread()).decode(errors="replace")
            raise RuntimeError(f"/generate answered {response.status_code}: {body_text}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            chunk = json.loads(line.removeprefix("data: "))
            finish = chunk["meta_info"].get("finish_reason") or {}
            if finish.get("type") == "abort":
                raise RuntimeError(f"the server aborted the stream: {finish}")
            if chunk.get("output_ids"):
                arrivals.append((now, len(chunk["output_ids"])))
    got = sum(n for _, n in arrivals)
    if got != new_tokens:
        raise RuntimeError(f"the stream carried {got} tokens, {new_tokens} were asked")
    return arrivals
