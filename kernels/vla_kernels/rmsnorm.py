"""RMSNorm as Llama computes it (fp32 statistics, weight applied in the activation dtype), with
an optional fused residual add, plus plain-torch references."""

from __future__ import annotations

import torch

from vla_kernels.launch_utils import next_power_of_2, require_launchable


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [rows, hidden] with a contiguous last dim; returns a new tensor of x's dtype."""
    return _launch(x, None, weight, eps)[0]


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (rmsnorm(x + residual), x + residual) in one pass over memory."""
    normed, summed = _launch(x, residual, weight, eps)
    assert summed is not None
    return normed, summed


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * normed.to(x.dtype).float()).to(x.dtype)


def add_rmsnorm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x + residual
    return rmsnorm_reference(summed, weight, eps), summed


def _launch(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    require_launchable(x, weight)
    from vla_kernels import triton_rmsnorm as kern

    if x.dim() != 2 or x.stride(-1) != 1:
        raise ValueError("rmsnorm expects [rows, hidden] with a contiguous last dim")
    out = torch.empty_like(x)
    summed = torch.empty_like(x) if residual is not None else None
    rows, hidden = x.shape
    if rows == 0:
        return out, summed
    block_h = next_power_of_2(hidden)
    res = residual if residual is not None else x
    res_out = summed if summed is not None else out
    kern.rmsnorm_kernel[(rows,)](
        x, res, weight, out, res_out, eps, hidden,
        x.stride(0), res.stride(0), out.stride(0), res_out.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK_H=block_h,
        num_warps=min(16, max(1, block_h // 256)),
    )  # fmt: skip
    return out, summed
