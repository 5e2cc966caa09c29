"""A denoising request's chunk, as the scheduler tracks it.

Its prompt is prefilled into the paged KV like any prompt, with no token sampled at the end.
Then the request takes one action-head pass per step: every request whose prefix is in place is
in the step's denoising batch (one pass for all of them, each at its own time t), until its
`num_steps` Euler steps are applied; its chunk then goes out with the request's end, which is
`FinishActions`. The head's suffix K/V is never written to the pool, so the request's KV is its
prompt alone. A request with real-time chunking guidance carries its `Guide` (target, weights),
built once here; the model worker applies it at every pass (`batch_runner.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vla_server.io_struct import Guidance, Tensor, TokenizedGenerateReqInput
from vla_server.model.denoise import initial_noise
from vla_server.model.guidance import Guide
from vla_server.policies.base import Denoise


@dataclass(eq=False)
class DenoiseState:
    noise: torch.Tensor  # [1, chunk_size, width] float32: where denoising starts
    state: torch.Tensor | None  # [1, state width]: the state the head reads beside the prompt
    times: tuple[float, ...]  # t of each Euler step, 1.0 down
    x: torch.Tensor  # the chunk at the current step; written by the model worker only
    scheduled: int = 0  # passes handed to batches
    done: int = 0  # passes whose results were applied
    guide: Guide | None = None  # real-time chunking toward the robot's previous chunk

    @classmethod
    def create(cls, spec: Denoise, msg: TokenizedGenerateReqInput) -> DenoiseState:
        if msg.noise is not None:  # checked against the head's shape by the front end
            noise = msg.noise.to_torch().float()[None]
        else:
            noise = initial_noise(msg.sampling_params.random_seed, spec.chunk_size, spec.width)
        state = None if msg.state is None else msg.state.to_torch()[None].float()
        return cls(noise, state, spec.times, noise.clone(), guide=_guide(spec, msg.guidance))

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
        """The denoised chunk [chunk_size, width], once every step is applied."""
        done = self.done == self.num_steps
        return Tensor.from_numpy(self.x[0].float().cpu().numpy()) if done else None

    def restart(self) -> None:
        """A retracted request recomputes its prefix, then denoises again from its noise."""
        self.x = self.noise.clone()
        self.scheduled = self.done = 0


def _guide(spec: Denoise, guidance: Guidance | None) -> Guide | None:
    if guidance is None:
        return None
    return Guide.build(
        guidance.prev_chunk.to_torch().float(),
        guidance.inference_delay,
        guidance.execution_horizon,
        schedule=guidance.rtc.schedule,
        max_weight=guidance.rtc.max_guidance_weight,
        jacobian=guidance.rtc.jacobian,
        chunk_size=spec.chunk_size,
        width=spec.width,
    )
