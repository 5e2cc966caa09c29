"""Shared set-up for the kernel tests: where kernels run, paged K/V fixtures, SDPA ground truth.

On a machine without CUDA the kernels run through the Triton interpreter; tests/conftest.py
switches it on before anything imports triton.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# (atol, rtol) of a kernel against an fp32 computation on the same rounded inputs. fp16: the
# kernels round softmax weights to fp16 before the P@V product; bf16: the interpreter converts
# fp32 to bf16 by truncation, so a value may sit one bf16 ulp (2^-8 relative) off.
TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3e-2, 3e-2),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    atol, rtol = TOLERANCE[actual.dtype]
    torch.testing.assert_close(actual.float().cpu(), expected.float().cpu(), atol=atol, rtol=rtol)


@dataclass
class PagedKV:
    """Requests' K/V scattered over a pool in shuffled slots, plus the dense copies."""

    k_buffer: torch.Tensor  # [pool + 1, kv_heads, head_dim]
    v_buffer: torch.Tensor
    req_to_token: torch.Tensor  # int32 [rows, max_len]
    req_pool_indices: torch.Tensor  # [batch] int64, shuffled rows
    dense_k: list[torch.Tensor]  # per request [context_len, kv_heads, head_dim]
    dense_v: list[torch.Tensor]


def build_paged_kv(
    context_lens: list[int], num_kv_heads: int, head_dim: int, dtype: torch.dtype, seed: int = 0
) -> PagedKV:
    gen = torch.Generator().manual_seed(seed)
    spare = 7  # unused slots, NaN like the padding slot: a stray read poisons the output
    pool = sum(context_lens) + spare
    shape = (pool + 1, num_kv_heads, head_dim)
    k_buffer = torch.full(shape, float("nan"))
    v_buffer = torch.full(shape, float("nan"))
    slots = torch.randperm(pool, generator=gen)[: sum(context_lens)] + 1
    rows = torch.randperm(len(context_lens) + 2, generator=gen)[: len(context_lens)]
    table_shape = (len(context_lens) + 2, max(context_lens, default=0) + 5)
    req_to_token = torch.zeros(table_shape, dtype=torch.int32)
    dense_k, dense_v, offset = [], [], 0
    for row, n in zip(rows.tolist(), context_lens, strict=True):
        mine = slots[offset : offset + n]
        offset += n
        req_to_token[row, :n] = mine.to(torch.int32)
        k = torch.randn((n, num_kv_heads, head_dim), generator=gen).to(dtype)
        v = torch.randn((n, num_kv_heads, head_dim), generator=gen).to(dtype)
        k_buffer[mine], v_buffer[mine] = k.float(), v.float()
        dense_k.append(k)
        dense_v.append(v)
    return PagedKV(
        k_buffer.to(dtype).to(DEVICE),
        v_buffer.to(dtype).to(DEVICE),
        req_to_token.to(DEVICE),
        rows.to(DEVICE),
        dense_k,
        dense_v,
    )


def sdpa_causal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    first_query_pos: int,
    bidirectional_prefix: int = 0,
) -> torch.Tensor:
    """torch SDPA in fp32; query i sits at position first_query_pos + i. [M, H, D] layout. Keys
    before `bidirectional_prefix` (a prefix-LM prefix) are visible to every query."""
    query_pos = first_query_pos + torch.arange(q.shape[0])
    last_seen = query_pos.clamp(min=bidirectional_prefix - 1)
    visible = torch.arange(k.shape[0])[None, :] <= last_seen[:, None]
    out = F.scaled_dot_product_attention(
        q.float().cpu().transpose(0, 1)[None],
        k.float().cpu().transpose(0, 1)[None],
        v.float().cpu().transpose(0, 1)[None],
        attn_mask=visible,
        scale=scale,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1)
