"""A batch as the scheduler hands it to the model worker, and what comes back.

Everything the forward needs is captured here when the batch is scheduled, so the worker thread
never reads scheduler state that the main thread may be changing meanwhile (overlap mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vla_server.scheduler.req import Req

# A new token that the previous batch samples: resolved by the worker from that batch's output.
PENDING = -1


@dataclass(eq=False)
class ScheduledBatch:
    reqs: list[Req]
    tokens: list[list[int]]  # new tokens per request; a first token may be PENDING
    prefix_lens: list[int]  # tokens of each request already in the KV pool
    rows: list[int]  # req_to_token rows
    slots: torch.Tensor  # KV slots of all new tokens, in order
    sample: list[bool]  # the request reaches the end of its sequence: sample its next token
    prompt_spans: list[tuple[int, int] | None]  # offsets of new tokens scoring prompt tokens
    prompt_targets: list[list[int]]  # the prompt tokens those spans score
    prev: ScheduledBatch | None = None  # the batch whose samples resolve PENDING tokens
    # Filled by the worker: the token each sampling request drew.
    sampled: dict[Req, int] = field(default_factory=dict)
    # Denoising requests taking `denoise_steps` denoising steps in this batch (after its
    # forward, if any), with their rows, prompt lengths and each step's time t, captured when
    # scheduled.
    denoise: list[Req] = field(default_factory=list)
    denoise_rows: list[int] = field(default_factory=list)
    denoise_prefix_lens: list[int] = field(default_factory=list)
    denoise_times: list[tuple[float, ...]] = field(default_factory=list)
    denoise_steps: int = 1

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def is_decode(self) -> bool:
        return all(len(t) == 1 for t in self.tokens)


@dataclass
class ReqLogprobs:
    output: tuple[float, list[tuple[float, int]]] | None = None  # of the sampled token
    prompt_vals: list[float] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    prompt_top: list[list[tuple[float, int]]] = field(default_factory=list)


@dataclass
class BatchResult:
    next_ids: list[int]  # per request; PENDING where it did not sample
    logprobs: list[ReqLogprobs | None]
    forward_s: float  # forward + sample wall time, for the deadline estimator
    denoise_s: float = 0.0  # the denoising pass's wall time
