"""The model's own decode step, measured in-process through the scheduler's batch runner."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from vla_server.io_struct import TokenizedGenerateReqInput
from vla_server.model.model_runner import ModelRunner
from vla_server.model.sampling import SamplingParams
from vla_server.policies.registry import detect
from vla_server.scheduler.batch_runner import BatchRunner
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.req import Req
from vla_server.scheduler.schedule_batch import ScheduledBatch

T = TypeVar("T")


def measure_decode_steps(
    model_path: str | Path,
    batch_size: int,
    steps: int,
    prompt_len: int = 16,
    warmup: int = 5,
    forwards: list[float] | None = None,
) -> list[float]:
    """Seconds per decode step of `batch_size` requests (after a prefill), `steps` samples:
    slot allocation, batch assembly, forward and sampling, as the scheduler does them.
    `forwards`, when given, gets the model forward alone of each of those steps (the bare
    model call, the floor any serving overhead is measured against)."""
    rig = DecodeRig(model_path, batch_size, steps + warmup + 2, prompt_len)
    return rig.round(steps, warmup, forwards)


class DecodeRig:
    """A model loaded once, decoding `batch_size` requests of `prompt_len` prompt tokens for up
    to `max_steps` steps a round; each round decodes fresh prompts and frees their KV (so a
    neighbour that decodes for minutes decodes, and does not reload the model)."""

    def __init__(
        self, model_path: str | Path, batch_size: int, max_steps: int, prompt_len: int = 16
    ):
        self.batch_size, self.max_steps, self.prompt_len = batch_size, max_steps, prompt_len
        self.runner = ModelRunner(
            detect(model_path),
            max_total_tokens=batch_size * (prompt_len + max_steps + 1),
            max_running_requests=batch_size,
            progress=False,
        )
        self.kv = KVCacheManager(
            self.runner.req_to_token_pool, self.runner.kv_pool, disable_radix=True
        )
        self.batch_runner = BatchRunner(self.runner, 0)
        self.bare: list[float] = []
        self.outputs: list[list[int]] = []  # the latest round's greedy tokens, per request
        self.runner.forward = _timed(self.runner.forward, self.bare)  # type: ignore[method-assign]

    def round(
        self, steps: int, warmup: int = 0, forwards: list[float] | None = None
    ) -> list[float]:
        """Seconds of each of `steps` decode steps after `warmup` (at most max_steps - 2)."""
        assert steps + warmup + 2 <= self.max_steps
        params = SamplingParams(max_new_tokens=self.max_steps, temperature=0.0, ignore_eos=True)
        reqs = [
            Req.from_wire(
                TokenizedGenerateReqInput(
                    rid=str(i),
                    input_ids=[(7 * i + j) % 200 + 10 for j in range(self.prompt_len)],
                    sampling_params=params,
                )
            )
            for i in range(self.batch_size)
        ]
        for r in reqs:
            prefix, node = self.kv.match(r)
            self.kv.admit(r, prefix, node)
        times: list[float] = []
        self.bare.clear()
        for step in range(steps + warmup + 1):
            t0 = time.perf_counter()
            result = self.batch_runner.run(_step_batch(reqs, self.kv))
            dt = time.perf_counter() - t0
            for r, t in zip(reqs, result.next_ids, strict=True):
                r.output_ids.append(t)
            if step > warmup:
                times.append(dt)
        if forwards is not None:
            forwards += self.bare[-steps:]
        self.outputs = [r.output_ids for r in reqs]
        for r in reqs:
            self.kv.release(r)
        return times


def measure_extend_forwards(
    model_path: str | Path, new_tokens: int, prefix_tokens: int, reps: int, warmup: int = 3
) -> list[float]:
    """Seconds of the bare model forward that computes `new_tokens` prompt tokens over
    `prefix_tokens` already in the KV pool (0: a fresh prompt), `reps` samples: what a session
    turn's new tokens cost with and without the history they attend to."""
    total = prefix_tokens + new_tokens
    runner = ModelRunner(
        detect(model_path),
        max_total_tokens=(reps + warmup) * total + 1,
        max_running_requests=reps + warmup,
        progress=False,
    )
    kv = KVCacheManager(runner.req_to_token_pool, runner.kv_pool, disable_radix=True)
    batch_runner = BatchRunner(runner, 0)
    params = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    bare: list[float] = []
    runner.forward = _timed(runner.forward, bare)  # type: ignore[method-assign]
    for rep in range(reps + warmup):
        ids = [(13 * rep + 7 * j) % 200 + 10 for j in range(total)]
        req = Req.from_wire(
            TokenizedGenerateReqInput(rid=str(rep), input_ids=ids, sampling_params=params)
        )
        prefix, node = kv.match(req)
        kv.admit(req, prefix, node)
        if prefix_tokens:
            batch_runner.run(_step_batch([req], kv, limit=prefix_tokens))
        batch_runner.run(_step_batch([req], kv))
    new_only = bare[1::2] if prefix_tokens else bare  # each rep's prefix forward comes first
    return new_only[warmup:]


def _timed(fn: Callable[..., T], out: list[float]) -> Callable[..., T]:
    def timed(*args: Any, **kwargs: Any) -> T:
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        out.append(time.perf_counter() - t0)
        return result

    return timed


def _step_batch(reqs: list[Req], kv: KVCacheManager, limit: int | None = None) -> ScheduledBatch:
    tokens = [r.fill_ids[r.kv_len : None if limit is None else r.kv_len + limit] for r in reqs]
    slots = kv.alloc(sum(len(t) for t in tokens))
    assert slots is not None
    batch = ScheduledBatch(
        reqs=reqs,
        tokens=tokens,
        prefix_lens=[r.kv_len for r in reqs],
        rows=[r.req_pool_idx for r in reqs],
        slots=slots,
        sample=[True] * len(reqs),  # type: ignore[misc]
        prompt_spans=[None] * len(reqs),
        prompt_targets=[[] for _ in reqs],
    )
    for r, t in zip(reqs, tokens, strict=True):
        r.kv_len += len(t)
    return batch
