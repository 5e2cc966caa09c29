"""Flow matching's Euler integration (pi0.md §2): t = 1 is noise, t = 0 the action chunk."""

from __future__ import annotations

import torch


def flow_times(num_steps: int) -> list[float]:
    """The times of the N steps: 1.0, 1 - 1/N, ..., 1/N."""
    dt = -1.0 / num_steps
    return [1.0 + k * dt for k in range(num_steps)]


def euler_update(x: torch.Tensor, v: torch.Tensor, num_steps: int) -> torch.Tensor:
    return x + (-1.0 / num_steps) * v
