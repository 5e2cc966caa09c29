"""The model's own decode step, measured in-process through the scheduler's batch runner."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from vla_server.managers.batch_runner import BatchRunner
from vla_server.managers.req import Req
from vla_server.managers.req_kv import ReqKVManager
from vla_server.model.model_runner import ModelRunner
from vla_server.model.sampling import SamplingParams


def measure_decode_steps(
    model_path: str | Path, batch_size: int, steps: int, prompt_len: int = 16, warmup: int = 5
) -> list[float]:
    """Seconds per decode step of `batch_size` requests (after a prefill), `steps` samples."""
    n_new = steps + warmup + 2
    runner = ModelRunner(
        model_path,
        max_total_tokens=batch_size * (prompt_len + n_new + 1),
        max_running_requests=batch_size,
        progress=False,
    )
    batch_runner = BatchRunner(runner, ReqKVManager(runner.req_to_token_pool, runner.kv_pool), 0)
    params = SamplingParams(max_new_tokens=n_new, temperature=0.0, ignore_eos=True)
    reqs = [
        Req(
            rid=str(i),
            origin_input_ids=[(7 * i + j) % 200 + 10 for j in range(prompt_len)],
            sampling_params=params,
        )
        for i in range(batch_size)
    ]
    times = []
    for step in range(steps + warmup + 1):
        is_decode = step > 0
        t0 = time.perf_counter()
        next_ids = batch_runner.run(reqs, is_decode)
        dt = time.perf_counter() - t0
        for r, t in zip(reqs, next_ids, strict=True):
            r.output_ids.append(t)
        if step > warmup:
            times.append(dt)
    del runner
    return times


def torch_threads() -> int:
    return torch.get_num_threads()
