"""Real-time chunking (RTC, Black, Galliker and Levine 2025): a denoised chunk guided toward the
actions the robot will still execute from its previous chunk, as LeRobot's
`RTCProcessor.denoise_step` computes it (shared/reference/rtc.md). Family-neutral: it works on
an action head's velocity function.

Conventions are `denoise.py`'s (LeRobot's and openpi's): t = 1 is noise, t = 0 data, and the
head's velocity v points from data to noise (x <- x - v / N). For a request whose previous
chunk, normalised and zero-padded to [H, width], is Y, at time t:

    tau = 1 - t                                   (the paper's time)
    x1 = x - t * v                                (the denoised estimate)
    err = W * (Y - x1)                            (W: the prefix weights of each action row)
    g = min(b, c / r2),  c = (1 - tau) / tau,  1 / r2 = ((1 - tau)^2 + tau^2) / (1 - tau)^2
        (NaN -> 0, +inf -> b, as LeRobot's `nan_to_num`; b = max_guidance_weight)
    v' = v - g * corr

* `identity` (LeRobot's code, the default): corr = err. LeRobot evaluates v before x requires
  grad, so its `autograd.grad(x1, x, err)` is the identity; no extra model work.
* `vjp` (the paper): corr = (d x1 / d x)^T err = err - t (d v / d x)^T err, the
  vector-Jacobian product taken by autograd through the action head (`vjp_velocity`; the
  caller's velocity function holds the prefix K/V as constants). One backward per step.

The signs follow from LeRobot's v = -v_paper (rtc.md, "Guided velocity").

W (`prefix_weights`, LeRobot's `get_prefix_weights(start=inference_delay,
end=execution_horizon, total=H)`): 1 on the rows the robot executes during the inference
delay, a ramp down to `end` (LeRobot's `execution_horizon`, the paper's H - s), 0 after;
`end` is first clamped to the previous chunk's length (nothing to continue past it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

SCHEDULES = ("zeros", "ones", "linear", "exp")
JACOBIANS = ("identity", "vjp")


def prefix_weights(schedule: str, start: int, end: int, total: int) -> torch.Tensor:
    """float32 [total]: LeRobot's prefix weights for a delay `start` and a soft region ending
    at `end` (`start` is clamped to `end`)."""
    start = min(start, end)
    if schedule == "zeros":
        weights = torch.zeros(total)
        weights[:start] = 1.0
        return weights
    if schedule == "ones":
        weights = torch.ones(total)
        weights[end:] = 0.0
        return weights
    if schedule not in ("linear", "exp"):
        raise ValueError(f"unknown schedule {schedule!r} (one of {', '.join(SCHEDULES)})")
    steps = min(end, total) - start
    ramp = torch.linspace(1, 0, steps + 2)[1:-1] if end > start and steps > 0 else torch.zeros(0)
    if schedule == "exp":
        ramp = ramp * torch.expm1(ramp).div(math.e - 1)
    return torch.cat((torch.ones(min(start, total)), ramp, torch.zeros(max(total - end, 0))))


def _nan_to_num(x: torch.Tensor, posinf: torch.Tensor) -> torch.Tensor:
    x = torch.where(torch.isnan(x), torch.zeros_like(x), x)
    return torch.where(torch.isposinf(x), posinf, x)


def guidance_scale(time: torch.Tensor, max_weight: torch.Tensor) -> torch.Tensor:
    """g [B] (float32) at times [B] (float32), clipped by each row's max_guidance_weight."""
    tau = 1 - time
    squared_one_minus_tau = (1 - tau) ** 2
    inv_r2 = (squared_one_minus_tau + tau**2) / squared_one_minus_tau
    c = _nan_to_num((1 - tau) / tau, max_weight)
    return torch.minimum(_nan_to_num(c * inv_r2, max_weight), max_weight)


@dataclass(frozen=True)
class Guide:
    """One request's guidance, built once when it is admitted."""

    target: torch.Tensor  # [1, H, width] float32: the previous chunk, normalised, zero-padded
    weights: torch.Tensor  # [1, H, 1] float32
    max_weight: float
    vjp: bool  # the Jacobian through the head (else LeRobot's identity)

    @classmethod
    def build(
        cls,
        prev_chunk: torch.Tensor,
        inference_delay: int,
        execution_horizon: int,
        *,
        schedule: str,
        max_weight: float,
        jacobian: str,
        chunk_size: int,
        width: int,
    ) -> Guide | None:
        """`prev_chunk` [n, <= width] (normalised, n <= chunk_size). None when every weight is
        0: the guided velocity is then exactly the unguided one, so the row runs unguided."""
        if jacobian not in JACOBIANS:
            raise ValueError(f"unknown jacobian {jacobian!r} (one of {', '.join(JACOBIANS)})")
        rows, dims = prev_chunk.shape
        end = min(execution_horizon, rows)  # LeRobot: nothing to merge past the chunk's end
        weights = prefix_weights(schedule, inference_delay, end, chunk_size)
        if not bool(weights.any()):
            return None
        target = torch.zeros((1, chunk_size, width), dtype=torch.float32)
        target[0, :rows, :dims] = prev_chunk.to(torch.float32)
        return cls(target, weights[None, :, None], float(max_weight), jacobian == "vjp")


@dataclass(frozen=True)
class GuideBatch:
    """The guides of a pass's guided rows, stacked in row order."""

    target: torch.Tensor  # [G, H, width]
    weights: torch.Tensor  # [G, H, 1]
    max_weight: torch.Tensor  # [G] float32

    @classmethod
    def stack(cls, guides: Sequence[Guide], device: torch.device) -> GuideBatch:
        return cls(
            torch.cat([g.target for g in guides]).to(device),
            torch.cat([g.weights for g in guides]).to(device),
            torch.tensor([g.max_weight for g in guides], dtype=torch.float32, device=device),
        )

    def error(self, x: torch.Tensor, v: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """err = W * (Y - x1) at the estimate x1 = x - t v."""
        return (self.target - (x - time[:, None, None] * v)) * self.weights

    def apply(self, v: torch.Tensor, correction: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """v - g(t) * correction."""
        return v - guidance_scale(time, self.max_weight)[:, None, None] * correction


def identity_velocity(
    x: torch.Tensor, v: torch.Tensor, time: torch.Tensor, guide: GuideBatch
) -> torch.Tensor:
    """LeRobot's guided velocity: the correction is the weighted error itself."""
    return guide.apply(v, guide.error(x, v, time), time)


def vjp_velocity(
    velocity: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    time: torch.Tensor,
    guide: GuideBatch,
) -> torch.Tensor:
    """The paper's guided velocity, the correction a vector-Jacobian product through
    `velocity` (x -> v at `time`). Run it with autograd on and outside inference mode, with
    `x`, `time` and whatever `velocity` saves for backward made outside inference mode."""
    x = x.detach().requires_grad_(True)
    v = velocity(x)
    estimate = x - time[:, None, None] * v
    with torch.no_grad():
        err = (guide.target - estimate) * guide.weights
    (correction,) = torch.autograd.grad(estimate, x, err)
    return guide.apply(v.detach(), correction, time)
