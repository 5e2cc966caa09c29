"""Neox-style rotary position embedding (the Llama layout: rotate the two halves of each head),
applied to q and k in one launch, plus a plain-torch reference.

The cos/sin table is built once from the model's inverse frequencies, so any rope-scaling scheme
that ends in ``inv_freq`` (and an attention scaling factor) is covered.
"""

from __future__ import annotations

import torch

from vla_kernels.launch_utils import next_power_of_2, require_launchable


def rotary_cos_sin_cache(
    inv_freq: torch.Tensor, max_positions: int, attention_scaling: float = 1.0
) -> torch.Tensor:
    """fp32 [max_positions, head_dim]: cos of each frequency, then sin of each frequency."""
    positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
    angles = positions[:, None] * inv_freq.float()[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1) * attention_scaling


def rotary_embedding(
    positions: torch.Tensor,  # [num_tokens]
    q: torch.Tensor,  # [num_tokens, num_q_heads, head_dim]
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    cos_sin_cache: torch.Tensor,  # from rotary_cos_sin_cache
) -> tuple[torch.Tensor, torch.Tensor]:
    require_launchable(q, k)
    from vla_kernels import triton_rotary as kern

    if q.stride(-1) != 1 or k.stride(-1) != 1 or cos_sin_cache.stride(-1) != 1:
        raise ValueError("rotary expects a contiguous head dimension")
    num_tokens, num_q_heads, head_dim = q.shape
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    if num_tokens == 0:
        return q_out, k_out
    half = head_dim // 2
    kern.rotary_kernel[(num_tokens,)](
        positions, q, k, q_out, k_out, cos_sin_cache,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        cos_sin_cache.stride(0), num_q_heads, k.shape[1],
        HALF=half, BLOCK_QH=next_power_of_2(num_q_heads), BLOCK_KH=next_power_of_2(k.shape[1]),
        BLOCK_HALF=next_power_of_2(half), num_warps=4,
    )  # fmt: skip
    return q_out, k_out


def rotary_embedding_reference(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    half = q.shape[-1] // 2
    table = cos_sin_cache[positions.long()][:, None, :]  # [T, 1, head_dim]
    cos, sin = table[..., :half], table[..., half:]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float()[..., :half], x.float()[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)
