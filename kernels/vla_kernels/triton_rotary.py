"""Triton kernel for neox-style rotary embedding of q and k (launched from rotary.py)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    X, Out, tok, stride_xt, stride_xh, stride_ot, stride_oh, num_heads, cos, sin,
    HALF: tl.constexpr, BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    heads = tl.arange(0, BLOCK_HEADS)
    cols = tl.arange(0, BLOCK_HALF)
    mask = (heads[:, None] < num_heads) & (cols[None, :] < HALF)
    src = X + tok * stride_xt + heads[:, None] * stride_xh + cols[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = Out + tok * stride_ot + heads[:, None] * stride_oh + cols[None, :]
    tl.store(dst, (x1 * cos - x2 * sin).to(Out.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * cos + x1 * sin).to(Out.dtype.element_ty), mask=mask)


@triton.jit
def rotary_kernel(
    Positions, Q, K, Q_out, K_out, Cos_sin,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cs, num_q_heads, num_kv_heads,
    HALF: tl.constexpr, BLOCK_QH: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(Positions + tok).to(tl.int64)
    cols = tl.arange(0, BLOCK_HALF)
    c_mask = cols < HALF
    cos = tl.load(Cos_sin + pos * stride_cs + cols, mask=c_mask, other=0.0)[None, :]
    sin = tl.load(Cos_sin + pos * stride_cs + HALF + cols, mask=c_mask, other=0.0)[None, :]
    _rotate_heads(
        Q, Q_out, tok, stride_qt, stride_qh, stride_qot, stride_qoh, num_q_heads, cos, sin,
        HALF, BLOCK_QH, BLOCK_HALF,
    )  # fmt: skip
    _rotate_heads(
        K, K_out, tok, stride_kt, stride_kh, stride_kot, stride_koh, num_kv_heads, cos, sin,
        HALF, BLOCK_KH, BLOCK_HALF,
    )  # fmt: skip
