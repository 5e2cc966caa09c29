"""Per-block pieces the Triton attention kernels share: gathering a block of K/V rows, and the
online-softmax step that folds it in."""

from __future__ import annotations

import triton
import triton.language as tl

# Finite start for running maxima (see online_softmax_block).
NEG_LARGE = tl.constexpr(-1.0e30)


@triton.jit
def load_kv_rows(K, V, rows, kvh, d, mask, stride_kt, stride_kh, stride_vt, stride_vh):
    """K and V of the token rows `rows` ([N]) of kv head `kvh` at dims `d`; `mask` is [N, D]."""
    k = tl.load(K + rows[:, None] * stride_kt + kvh * stride_kh + d[None, :], mask=mask, other=0.0)
    v = tl.load(V + rows[:, None] * stride_vt + kvh * stride_vh + d[None, :], mask=mask, other=0.0)
    return k, v


@triton.jit
def online_softmax_block(
    q, k, v, visible, m_i, l_i, acc, scale, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr
):
    """Fold one block of keys/values into running (max, sum-exp, weighted sum) per query row.

    ``visible`` broadcasts to [rows, keys]. Running maxima start at a large finite negative value
    rather than -inf so that a row with no visible key yet keeps alpha = exp(0) = 1 instead of NaN.
    """
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
    qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.exp(qk - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc
