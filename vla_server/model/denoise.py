"""Flow-matching integration of an action chunk, as openpi, LeRobot and transformers'
sample: t = 1 is noise, t = 0 data; `num_steps` Euler steps of dt = -1/N from t = 1,
x <- x + dt * v(x, t).

The times are Python floats `1.0 + k * dt` (1.0, 0.9, ..., 0.1 for N = 10), computed exactly as
transformers' `sample_actions` does, so both integrate at bit-identical times.

Noise: a request with `seed` s starts from `torch.randn((1, chunk_size, width),
generator=torch.Generator("cpu").manual_seed(s), dtype=torch.float32)` (`initial_noise`), so
any client can reproduce a chunk; without a seed the noise is fresh.
"""

from __future__ import annotations

import torch


def denoise_times(num_steps: int) -> list[float]:
    """The time of each of the `num_steps` velocity evaluations, from 1.0 down."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    dt = -1.0 / num_steps
    return [1.0 + k * dt for k in range(num_steps)]


def euler_update(x: torch.Tensor, v: torch.Tensor, num_steps: int) -> torch.Tensor:
    """One Euler step x + dt * v, dt = -1 / num_steps."""
    return x + (-1.0 / num_steps) * v


def initial_noise(seed: int | None, chunk_size: int, width: int) -> torch.Tensor:
    """The chunk a request starts denoising from: seeded (documented above) or fresh."""
    generator = None if seed is None else torch.Generator("cpu").manual_seed(seed)
    return torch.randn((1, chunk_size, width), generator=generator, dtype=torch.float32)


def check_chunk_inputs(
    x_t: torch.Tensor, time: torch.Tensor, rows: int, chunk_size: int, width: int
) -> None:
    """A velocity call's noisy chunks must be [rows, chunk_size, width] and its times [rows]."""
    if tuple(x_t.shape) != (rows, chunk_size, width):
        raise ValueError(f"x_t must be {[rows, chunk_size, width]}, got {list(x_t.shape)}")
    if tuple(time.shape) != (rows,):
        raise ValueError(f"time must be [{rows}], got {list(time.shape)}")
