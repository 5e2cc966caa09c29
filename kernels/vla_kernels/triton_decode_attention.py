"""Triton kernels for paged decode attention with split-K (launched from decode_attention.py).

Stage 1: program (request, kv head, split) attends the GROUP query heads that share this kv head
to one contiguous slice of the request's context, gathered through req_to_token, and writes the
normalised partial output plus its log-sum-exp. Stage 2: program (request, q head) combines the
splits, weighting each by exp(lse_split - max lse), which is stable for any context length.
"""

from __future__ import annotations

import triton
import triton.language as tl

from vla_kernels.triton_attention_blocks import NEG_LARGE, load_kv_rows, online_softmax_block


@triton.jit
def decode_split_kernel(
    Q, K_buf, V_buf, Req_to_token, Req_pool_idx, Seq_lens, New_slots, Part_o, Part_lse,
    scale, num_splits,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_req,
    stride_pob, stride_poh, stride_pos, stride_plb, stride_plh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, HAS_NEW_SLOTS: tl.constexpr, UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kvh * GROUP + g
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    q = tl.load(
        Q + b * stride_qt + heads[:, None] * stride_qh + d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    seq_len = tl.load(Seq_lens + b)
    row = tl.load(Req_pool_idx + b).to(tl.int64)
    # Without HAS_NEW_SLOTS the launcher passes a stand-in pointer; the value is then unused.
    new_slot = tl.load(New_slots + b).to(tl.int64)
    # Splits start on block boundaries; trailing splits of a short request may be empty.
    split_len = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    m_i = tl.full([BLOCK_G], NEG_LARGE, tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        n_mask = pos < end
        slot = tl.load(Req_to_token + row * stride_req + pos, mask=n_mask, other=0).to(tl.int64)
        if HAS_NEW_SLOTS:
            slot = tl.where(pos == seq_len - 1, new_slot, slot)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k, v = load_kv_rows(
            K_buf, V_buf, slot, kvh, d, kv_mask, stride_kt, stride_kh, stride_vt, stride_vh
        )
        m_i, l_i, acc = online_softmax_block(
            q, k, v, n_mask[None, :], m_i, l_i, acc, scale, UPCAST, DOT_PRECISION
        )

    nonempty = l_i > 0
    l_safe = tl.where(nonempty, l_i, 1.0)
    lse = tl.where(nonempty, m_i + tl.log(l_safe), float("-inf"))
    part_o = Part_o + b * stride_pob + split * stride_pos + heads[:, None] * stride_poh + d[None, :]
    tl.store(part_o, acc / l_safe[:, None], mask=g_mask[:, None] & d_mask[None, :])
    tl.store(Part_lse + b * stride_plb + heads * stride_plh + split, lse, mask=g_mask)


@triton.jit
def decode_combine_kernel(
    Part_o, Part_lse, Out, num_splits,
    stride_pob, stride_poh, stride_pos, stride_plb, stride_plh, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    s_mask = s < num_splits
    d_mask = d < HEAD_DIM
    lse = tl.load(Part_lse + b * stride_plb + h * stride_plh + s, mask=s_mask, other=float("-inf"))
    # Every request has at least one token, so at least one split is non-empty and finite.
    weight = tl.exp(lse - tl.max(lse, 0))
    part = tl.load(
        Part_o + b * stride_pob + h * stride_poh + s[:, None] * stride_pos + d[None, :],
        mask=s_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    out = tl.sum(weight[:, None] * part, 0) / tl.sum(weight, 0)
    tl.store(Out + b * stride_ot + h * stride_oh + d, out.to(Out.dtype.element_ty), mask=d_mask)
