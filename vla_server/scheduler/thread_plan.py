"""Torch CPU threads per step of the model worker (`batch_runner.py`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from vla_server.config import ModelRunnerConfig, default_torch_threads


@dataclass(frozen=True)
class ThreadPlan:
    """Torch CPU threads per step: `prefill` for a step of one request with at least
    `min_tokens` new tokens (a lone robot's frame: nothing else wants the other cores), `decode`
    for the rest (see `default_torch_threads` for why). With several requests in flight the
    front end is busy too, and more model threads than free cores stall at every barrier: 8
    robots' throughput fell 4x in `bench control` when any long step took every core.

    A step nothing streams from (a denoising model's prompts and action-head passes: no token,
    no chunk before the last pass) takes `prefill` whatever the requests when its matmuls are
    worth splitting, new tokens x width^2 >= `min_silent_work`: the front end has nothing to
    send meanwhile. A mid-size pi policy (width 512) qualifies from one robot's 50-action pass
    (its ten passes 140 instead of 200 ms; 8 robots 1.2x the chunks/s); the tiny test models do
    not (their passes are thread overhead: 8 robots lost 28 % of their chunks/s on 2 threads)."""

    decode: int
    prefill: int
    min_tokens: int = 64
    min_silent_work: int = 1 << 22

    @classmethod
    def of(cls, model: ModelRunnerConfig) -> ThreadPlan:
        decode = model.torch_num_threads or default_torch_threads()
        return cls(decode, model.prefill_torch_threads or os.cpu_count() or decode)

    def threads_for(
        self, requests: int, new_tokens: int, streams: bool = True, width: int = 0
    ) -> int:
        """`width`: the model's hidden size (0: unknown; a silent step keeps `decode`)."""
        long_alone = requests == 1 and new_tokens >= self.min_tokens
        big_silent = not streams and new_tokens * width * width >= self.min_silent_work
        return self.prefill if long_alone or big_silent else self.decode
