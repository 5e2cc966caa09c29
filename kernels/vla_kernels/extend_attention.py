"""Extend (prefill) attention over a ragged batch: each request's new tokens attend to its cached
prefix in the KV pool and causally to each other.

Request i brings ``extend_lens[i]`` new tokens at rows ``extend_start_loc[i]...`` of q/k/v and
already has ``prefix_lens[i]`` tokens in the pool, at slots ``req_to_token[req_pool_indices[i],
:prefix_lens[i]]``. With ``prefix_lm_lens`` (prefix-LM models such as PaliGemma), the first
``prefix_lm_lens[i]`` tokens of request i form a bidirectional prefix: every token sees all of
them, whatever its position (0: plain causal).
"""

from __future__ import annotations

import torch

from vla_kernels.launch_utils import (
    check_attention_operands,
    dot_precision,
    next_power_of_2,
    require_launchable,
    upcast_in_kernel,
)
from vla_kernels.reference_attention import dense_causal_attention


def extend_attention(
    q: torch.Tensor,  # [num_tokens, num_q_heads, head_dim]
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], the new tokens' keys
    v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_buffer: torch.Tensor,  # [pool_size + 1, num_kv_heads, head_dim]
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,  # int32 [rows, max_context_len]
    req_pool_indices: torch.Tensor,  # [batch]
    prefix_lens: torch.Tensor,  # [batch]
    extend_lens: torch.Tensor,  # [batch]
    extend_start_loc: torch.Tensor,  # [batch]
    scale: float,
    *,
    prefix_lm_lens: torch.Tensor | None = None,  # [batch], absolute
    max_extend_len: int | None = None,
    block_m: int = 64,
    block_n: int = 64,
) -> torch.Tensor:  # [num_tokens, num_q_heads, head_dim], q's dtype
    require_launchable(q, k_buffer)
    from vla_kernels import triton_extend_attention as kern

    check_attention_operands(q, k_buffer, v_buffer)
    if k.dtype != q.dtype or v.dtype != q.dtype or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("new k/v must have q's dtype and a contiguous head dimension")
    batch, (_, num_q_heads, head_dim) = req_pool_indices.shape[0], q.shape
    if max_extend_len is None:
        max_extend_len = int(extend_lens.max()) if batch else 0
    out = torch.empty_like(q)
    if batch == 0 or max_extend_len == 0:
        return out
    grid = (batch, num_q_heads, -(-max_extend_len // block_m))
    block_d = next_power_of_2(head_dim)
    bidirectional = prefix_lm_lens if prefix_lm_lens is not None else prefix_lens  # stand-in
    kern.extend_kernel[grid](
        q, k, v, out, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens,
        extend_lens, extend_start_loc, bidirectional, scale,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), k_buffer.stride(0), k_buffer.stride(1),
        v_buffer.stride(0), v_buffer.stride(1), req_to_token.stride(0),
        GROUP=num_q_heads // k_buffer.shape[1], HEAD_DIM=head_dim, BLOCK_M=block_m,
        BLOCK_N=block_n, BLOCK_D=block_d, HAS_PREFIX_LM=prefix_lm_lens is not None,
        UPCAST=upcast_in_kernel(q.dtype),
        DOT_PRECISION=dot_precision(q.dtype), num_warps=4 if block_d <= 64 else 8,
        num_stages=1,
    )  # fmt: skip
    return out


def extend_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    scale: float,
    prefix_lm_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same contract as extend_attention, one request at a time in plain torch."""
    out = torch.empty_like(q)
    for i in range(req_pool_indices.shape[0]):
        bidirectional = 0 if prefix_lm_lens is None else int(prefix_lm_lens[i])
        prefix, new = int(prefix_lens[i]), int(extend_lens[i])
        first = int(extend_start_loc[i])
        rows = slice(first, first + new)
        slots = req_to_token[int(req_pool_indices[i]), :prefix].long()
        keys = torch.cat([k_buffer[slots], k[rows].to(k_buffer.dtype)])
        values = torch.cat([v_buffer[slots], v[rows].to(v_buffer.dtype)])
        out[rows] = dense_causal_attention(q[rows], keys, values, scale, prefix, bidirectional)
    return out
