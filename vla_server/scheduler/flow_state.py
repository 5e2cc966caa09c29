"""A pi0 / pi0.5 request's denoising, as the scheduler tracks it.

Its prompt (images, text; pi0.5's state) is prefilled into the paged KV like any prompt, with
no token sampled at the end. Then the request takes one expert pass per step: every request
whose prefix is in place is in the step's denoising batch (one pass for all of them, each at
its own time t), until its `num_steps` Euler steps are applied; its chunk then goes out as the
request's one `actions` message and it finishes by length (its denoising budget). The expert's
suffix K/V is never written to the pool, so the request's KV is its prompt alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from vla_server.io_struct import Tensor, TokenizedGenerateReqInput
from vla_server.model.flow_matching import flow_times
from vla_server.multimodal.flow_actions import initial_noise


@dataclass(frozen=True)
class FlowSpec:
    """The denoising every action request of a flow-matching model runs."""

    chunk_size: int
    max_action_dim: int
    num_steps: int

    @cached_property
    def times(self) -> tuple[float, ...]:
        return tuple(flow_times(self.num_steps))


@dataclass(eq=False)
class FlowState:
    noise: torch.Tensor  # [1, chunk_size, max_action_dim] float32: where denoising starts
    state: torch.Tensor | None  # [1, max_state_dim] pi0's normalised state (pi0.5: None)
    times: tuple[float, ...]  # t of each Euler step, 1.0 down
    x: torch.Tensor  # the chunk at the current step; written by the model worker only
    scheduled: int = 0  # passes handed to batches
    done: int = 0  # passes whose results were applied

    @classmethod
    def create(cls, spec: FlowSpec, msg: TokenizedGenerateReqInput) -> FlowState:
        noise = initial_noise(msg.sampling_params.random_seed, spec.chunk_size, spec.max_action_dim)
        state = None if msg.action_state is None else msg.action_state.to_torch()[None].float()
        return cls(noise, state, spec.times, noise.clone())

    @property
    def num_steps(self) -> int:
        return len(self.times)

    @property
    def next_time(self) -> float:
        """The time of the next pass to schedule."""
        return self.times[self.scheduled]

    @property
    def to_schedule(self) -> bool:
        return self.scheduled < self.num_steps

    @property
    def steps_left(self) -> int:
        return self.num_steps - self.done

    def chunk(self) -> Tensor | None:
        """The denoised chunk [chunk_size, max_action_dim], once every step is applied."""
        done = self.done == self.num_steps
        return Tensor.from_numpy(self.x[0].float().cpu().numpy()) if done else None

    def restart(self) -> None:
        """A retracted request recomputes its prefix, then denoises again from its noise."""
        self.x = self.noise.clone()
        self.scheduled = self.done = 0
