"""Small building blocks of the decoder: weights without autograd, RMSNorm (Llama and Gemma)."""

from __future__ import annotations

import torch
from torch import nn


def empty_weight(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    """An uninitialised frozen parameter; the weight loader fills it."""
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class RMSNorm(nn.Module):
    def __init__(
        self, hidden_size: int, eps: float, dtype: torch.dtype, device: torch.device | str
    ):
        super().__init__()
        self.weight = empty_weight(hidden_size, dtype=dtype, device=device)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 and scale in the model dtype, in the reference's order of operations.
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class UnitOffsetRMSNorm(RMSNorm):
    """Gemma's RMSNorm: `x * rsqrt(mean(x^2) + eps) * (1 + w)`, all in float32, then cast back
    (the weight is stored as an offset from 1, and the reference scales before the cast)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1.0 + self.weight.to(torch.float32))).to(x.dtype)
