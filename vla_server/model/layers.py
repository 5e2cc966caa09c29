"""Small building blocks of the decoder: weights without autograd, RMSNorm."""

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
