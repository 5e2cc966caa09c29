"""Triton kernel for RMSNorm with an optional fused residual add (launched from rmsnorm.py)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(
    X, Residual, W, Out, Residual_out, eps, hidden,
    stride_x, stride_r, stride_o, stride_ro,
    HAS_RESIDUAL: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < hidden
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(Residual + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        # The sum is rounded to the activation dtype first, as the unfused model does.
        h = (x + r).to(Residual_out.dtype.element_ty)
        tl.store(Residual_out + row * stride_ro + cols, h, mask=mask)
        x = h.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, 0) / hidden + eps)
    normed = (x * inv_rms).to(Out.dtype.element_ty).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_o + cols, (normed * w).to(Out.dtype.element_ty), mask=mask)
