"""Decode attention over the paged KV pool: one new query token per request.

Each request's K/V for positions [0, seq_len) are read through ``req_to_token``; the current
token's K/V must already be in the pool, at ``new_token_slots[i]`` when given (so the table row
need not hold it yet), else at the table's entry for position seq_len - 1. Long contexts are cut
into ``num_kv_splits`` slices that run in parallel and are merged by log-sum-exp (see
triton_decode_attention.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vla_kernels.launch_utils import (
    check_attention_operands,
    dot_precision,
    multiprocessor_count,
    next_power_of_2,
    require_launchable,
    upcast_in_kernel,
)
from vla_kernels.reference_attention import dense_causal_attention

MAX_KV_SPLITS = 16
# A split shorter than this costs more in the combine step than it saves in parallelism.
MIN_TOKENS_PER_SPLIT = 256


@dataclass
class SplitKWorkspace:
    """fp32 scratch for split-K partial results; allocate once per batch, reuse across layers."""

    partial_out: torch.Tensor  # [batch, num_q_heads, splits, head_dim]
    partial_lse: torch.Tensor  # [batch, num_q_heads, splits]

    @classmethod
    def allocate(
        cls, batch: int, num_q_heads: int, splits: int, head_dim: int, device: torch.device
    ) -> SplitKWorkspace:
        shape = (batch, num_q_heads, splits)
        return cls(
            torch.empty((*shape, head_dim), dtype=torch.float32, device=device),
            torch.empty(shape, dtype=torch.float32, device=device),
        )


def default_num_kv_splits(
    batch: int, num_kv_heads: int, max_seq_len: int, device: torch.device
) -> int:
    """Enough splits to give every streaming multiprocessor about two programs, no more."""
    if device.type != "cuda":
        return 1
    wanted = -(-2 * multiprocessor_count(device) // max(1, batch * num_kv_heads))
    useful = -(-max_seq_len // MIN_TOKENS_PER_SPLIT)
    return max(1, min(MAX_KV_SPLITS, wanted, useful))


def decode_attention(
    q: torch.Tensor,  # [batch, num_q_heads, head_dim]
    k_buffer: torch.Tensor,  # [pool_size + 1, num_kv_heads, head_dim]
    v_buffer: torch.Tensor,  # [pool_size + 1, num_kv_heads, head_dim]
    req_to_token: torch.Tensor,  # int32 [rows, max_context_len]
    req_pool_indices: torch.Tensor,  # [batch]
    seq_lens: torch.Tensor,  # [batch], each >= 1
    scale: float,
    *,
    new_token_slots: torch.Tensor | None = None,  # [batch]
    max_seq_len: int | None = None,
    num_kv_splits: int | None = None,
    block_n: int = 64,
    workspace: SplitKWorkspace | None = None,
) -> torch.Tensor:  # [batch, num_q_heads, head_dim], q's dtype
    require_launchable(q, k_buffer)
    from vla_kernels import triton_decode_attention as kern

    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    check_attention_operands(q, k_buffer, v_buffer)
    if max_seq_len is None:
        max_seq_len = int(seq_lens.max()) if batch else 0
    splits = num_kv_splits or default_num_kv_splits(batch, num_kv_heads, max_seq_len, q.device)
    ws = workspace or SplitKWorkspace.allocate(batch, num_q_heads, splits, head_dim, q.device)
    out = torch.empty_like(q)
    if batch == 0:
        return out
    group = num_q_heads // num_kv_heads
    block_d = next_power_of_2(head_dim)
    po, pl = ws.partial_out, ws.partial_lse
    kern.decode_split_kernel[(batch, num_kv_heads, splits)](
        q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens,
        new_token_slots if new_token_slots is not None else seq_lens, po, pl, scale, splits,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1),
        v_buffer.stride(0), v_buffer.stride(1), req_to_token.stride(0),
        po.stride(0), po.stride(1), po.stride(2), pl.stride(0), pl.stride(1),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_G=max(16, next_power_of_2(group)),
        BLOCK_D=block_d, BLOCK_N=block_n, HAS_NEW_SLOTS=new_token_slots is not None,
        UPCAST=upcast_in_kernel(q.dtype),
        DOT_PRECISION=dot_precision(q.dtype), num_warps=4, num_stages=2,
    )  # fmt: skip
    kern.decode_combine_kernel[(batch, num_q_heads)](
        po, pl, out, splits,
        po.stride(0), po.stride(1), po.stride(2), pl.stride(0), pl.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_S=next_power_of_2(splits), BLOCK_D=block_d, num_warps=4,
    )  # fmt: skip
    return out


def decode_attention_reference(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    new_token_slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same contract as decode_attention, one request at a time in plain torch."""
    out = torch.empty_like(q)
    for i in range(q.shape[0]):
        seq_len = int(seq_lens[i])
        slots = req_to_token[int(req_pool_indices[i]), :seq_len].long()
        if new_token_slots is not None:
            slots = torch.cat([slots[:-1], new_token_slots[i : i + 1].long()])
        out[i] = dense_causal_attention(
            q[i : i + 1], k_buffer[slots], v_buffer[slots], scale, seq_len - 1
        )[0]
    return out
