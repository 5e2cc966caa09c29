"""Test-only real-time chunking (RTC) reference, written from LeRobot's formula as
shared/reference/rtc.md states it, over the dense pi0 / pi0.5 reference
(`pi0_reference.SpecReference`: one joint sequence [prefix ; suffix], the prefix recomputed at
every Euler step). It shares no code with the node.

LeRobot's convention: t = 1 is noise, x <- x + dt * v with dt = -1 / N, tau = 1 - t. At each
step, with Y the previous chunk (normalised, zero-padded to [H, 32]) and W the prefix weights:

    x1 = x - t * v(x);   err = W * (Y - x1)
    g = min(b, nan_to_num(c * inv_r2, posinf=b)),  c = nan_to_num((1 - tau) / tau, posinf=b),
        inv_r2 = ((1 - tau)^2 + tau^2) / (1 - tau)^2
    v' = v - g * corr

* "identity" (LeRobot's code): v is evaluated before x requires grad, so corr = err.
* "vjp" (the paper): corr = autograd.grad(x1, x, err) with v = v(x) in the graph, through the
  whole dense model (the prefix stream included: it does not depend on x).

The weights are kinetix's formula (rtc.md): linear `clip((start - 1 - i) / (end - start + 1) + 1,
0, 1)`, 0 from `end` on; exp maps each value c to `c * (e^c - 1) / (e - 1)`; zeros: 1 before
`start`; ones: 1 before `end`; `start = min(start, end)` first, and `end` is clamped to the
previous chunk's length.
"""

from __future__ import annotations

import math

import torch

from tests.support.pi0_reference import SpecReference


def prefix_weights(schedule: str, start: int, end: int, total: int) -> torch.Tensor:
    start = min(start, end)
    i = torch.arange(total, dtype=torch.float64)
    if schedule == "zeros":
        w = (i < start).double()
    elif schedule == "ones":
        w = (i < end).double()
    else:
        w = ((start - 1 - i) / (end - start + 1) + 1).clamp(0, 1)
        w = torch.where(i >= end, torch.zeros_like(w), w)
        if schedule == "exp":
            w = w * torch.expm1(w) / (math.e - 1)
    return w.float()


def guidance_weight(t: float, beta: float) -> float:
    tau = 1.0 - t
    inv_r2 = ((1 - tau) ** 2 + tau**2) / (1 - tau) ** 2 if tau != 1 else math.inf
    c = (1 - tau) / tau if tau != 0 else math.inf
    c = beta if c == math.inf else c
    g = c * inv_r2 if not (c == 0 and inv_r2 == math.inf) else 0.0
    return min(beta, beta if g == math.inf else g)


def target_and_weights(prev: torch.Tensor, delay: int, horizon: int, schedule: str, total: int,
                       width: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Y [H, width] (prev [n, k] normalised, zero-padded) and W [H, 1]."""
    target = torch.zeros(total, width)
    target[: prev.shape[0], : prev.shape[1]] = prev
    w = prefix_weights(schedule, delay, min(horizon, prev.shape[0]), total)
    return target, w[:, None]


def guided_velocity(velocity, x: torch.Tensor, t: float, target, weights, beta: float,
                    jacobian: str) -> torch.Tensor:  # fmt: skip
    g = guidance_weight(t, beta)
    if jacobian == "identity":
        with torch.no_grad():
            v = velocity(x)
            err = weights * (target - (x - t * v))
            return v - g * err
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        v = velocity(x)
        x1 = x - t * v
        err = (weights * (target - x1)).detach()
        (corr,) = torch.autograd.grad(x1, x, err)
    return (v - g * corr).detach()


def guided_sample(ref: SpecReference, pixels, valid_cameras: list[bool], text_ids: list[int],
                  state, noise: torch.Tensor, guide: dict | None,
                  num_steps: int = 10) -> torch.Tensor:  # fmt: skip
    """The chunk [H, 32] from `noise` with `guide`: prev (normalised [n, k]), delay, horizon,
    schedule, beta, jacobian; None: unguided (as `SpecReference.sample`)."""
    per_image = ref.siglip.config.image_size // ref.siglip.config.patch_size
    valid = [c for c in valid_cameras for _ in range(per_image**2)] + [True] * len(text_ids)
    with torch.no_grad():
        prefix = ref.prefix(pixels, text_ids)
    x, dt = noise.clone(), -1.0 / num_steps
    if guide is not None:
        target, weights = target_and_weights(
            guide["prev"], guide["delay"], guide["horizon"], guide["schedule"], x.shape[0],
            x.shape[1],
        )  # fmt: skip
    for step in range(num_steps):
        t = 1.0 + step * dt

        def velocity(z, t=t):
            return ref.velocity(prefix, valid, z, t, state)

        if guide is None:
            with torch.no_grad():
                v = velocity(x)
        else:
            v = guided_velocity(velocity, x, t, target, weights, guide["beta"], guide["jacobian"])
        x = x + dt * v
    return x
