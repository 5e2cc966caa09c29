"""Triton kernel for extend (prefill) attention over a ragged batch (launched from
extend_attention.py).

Program (request, q head, block of BLOCK_M new tokens): first the request's cached prefix,
gathered from the pool through req_to_token, then its new tokens read straight from the
contiguous k/v of this forward, under the causal mask (widened, with HAS_PREFIX_LM, to every new
token inside the request's bidirectional prefix). The new tokens never need to be in the pool
or in req_to_token for this kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from vla_kernels.triton_attention_blocks import NEG_LARGE, load_kv_rows, online_softmax_block


@triton.jit
def attend_prefix(
    q, K_buf, V_buf, Slots, prefix_len, kvh, d, d_mask, m_i, l_i, acc, scale,
    stride_kt, stride_kh, stride_vt, stride_vh,
    BLOCK_N: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """The online softmax over the request's cached prefix, gathered from the pool through its
    req_to_token row (`Slots`); no mask beyond the prefix length: all of it precedes the rows."""
    for n0 in range(0, prefix_len, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        n_mask = pos < prefix_len
        slot = tl.load(Slots + pos, mask=n_mask, other=0).to(tl.int64)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k, v = load_kv_rows(
            K_buf, V_buf, slot, kvh, d, kv_mask, stride_kt, stride_kh, stride_vt, stride_vh
        )
        m_i, l_i, acc = online_softmax_block(
            q, k, v, n_mask[None, :], m_i, l_i, acc, scale, UPCAST, DOT_PRECISION
        )
    return m_i, l_i, acc


@triton.jit
def attend_new(
    q, K_new, V_new, first_tok, m, new_end, bidir_end, kvh, d, d_mask, m_i, l_i, acc, scale,
    stride_knt, stride_knh, stride_vnt, stride_vnh,
    BLOCK_N: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """The online softmax over this forward's new tokens (read from its contiguous k/v) up to
    `new_end`: causal for rows `m`, except that tokens before `bidir_end` are seen by all."""
    for n0 in range(0, new_end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_mask = n < new_end
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k, v = load_kv_rows(
            K_new, V_new, first_tok + n, kvh, d, kv_mask,
            stride_knt, stride_knh, stride_vnt, stride_vnh,
        )  # fmt: skip
        causal = ((n[None, :] <= m[:, None]) | (n[None, :] < bidir_end)) & n_mask[None, :]
        m_i, l_i, acc = online_softmax_block(
            q, k, v, causal, m_i, l_i, acc, scale, UPCAST, DOT_PRECISION
        )
    return m_i, l_i, acc


@triton.jit
def extend_kernel(
    Q, K_new, V_new, Out, K_buf, V_buf, Req_to_token, Req_pool_idx, Prefix_lens, Extend_lens,
    Extend_start, Prefix_lm_lens, scale,
    stride_qt, stride_qh, stride_knt, stride_knh, stride_vnt, stride_vnh, stride_ot, stride_oh,
    stride_kt, stride_kh, stride_vt, stride_vh, stride_req,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, HAS_PREFIX_LM: tl.constexpr, UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    h = tl.program_id(1)
    m_block = tl.program_id(2)
    extend_len = tl.load(Extend_lens + b)
    if m_block * BLOCK_M >= extend_len:
        return
    kvh = h // GROUP
    prefix_len = tl.load(Prefix_lens + b)
    first_tok = tl.load(Extend_start + b).to(tl.int64)
    row = tl.load(Req_pool_idx + b).to(tl.int64)
    m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = m < extend_len
    d = tl.arange(0, BLOCK_D)
    d_mask = d < HEAD_DIM
    q = tl.load(
        Q + (first_tok + m[:, None]) * stride_qt + h * stride_qh + d[None, :],
        mask=m_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], NEG_LARGE, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    m_i, l_i, acc = attend_prefix(
        q, K_buf, V_buf, Req_to_token + row * stride_req, prefix_len, kvh, d, d_mask,
        m_i, l_i, acc, scale, stride_kt, stride_kh, stride_vt, stride_vh,
        BLOCK_N, UPCAST, DOT_PRECISION,
    )  # fmt: skip
    # New tokens before `bidir_end` (relative to the first new token) are visible to all rows.
    # Without HAS_PREFIX_LM the launcher passes a stand-in pointer, never read.
    bidir_end = 0
    if HAS_PREFIX_LM:
        bidir_end = tl.load(Prefix_lm_lens + b) - prefix_len
    # New tokens past this block's last row (and past the bidirectional prefix) are invisible
    # to all of its rows.
    new_end = tl.minimum(extend_len, tl.maximum((m_block + 1) * BLOCK_M, bidir_end))
    m_i, l_i, acc = attend_new(
        q, K_new, V_new, first_tok, m, new_end, bidir_end, kvh, d, d_mask, m_i, l_i, acc, scale,
        stride_knt, stride_knh, stride_vnt, stride_vnh, BLOCK_N, UPCAST, DOT_PRECISION,
    )  # fmt: skip

    # Every valid row sees at least itself, so only masked padding rows have l_i == 0.
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        Out + (first_tok + m[:, None]) * stride_ot + h * stride_oh + d[None, :],
        out.to(Out.dtype.element_ty),
        mask=m_mask[:, None] & d_mask[None, :],
    )
