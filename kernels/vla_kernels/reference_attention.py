"""Plain-torch attention over dense per-request K/V, the ground truth the paged references use."""

from __future__ import annotations

import torch


def dense_causal_attention(
    q: torch.Tensor,  # [num_queries, num_q_heads, head_dim]
    k: torch.Tensor,  # [num_keys, num_kv_heads, head_dim]
    v: torch.Tensor,  # [num_keys, num_kv_heads, head_dim]
    scale: float,
    first_query_pos: int,
    bidirectional_prefix: int = 0,
) -> torch.Tensor:  # [num_queries, num_q_heads, head_dim], in q's dtype
    """Query i sits at position first_query_pos + i and sees keys 0..first_query_pos + i, and
    every key before `bidirectional_prefix` (a prefix-LM prefix) whatever its position.

    Computed in fp32 with an explicit softmax, so it shares no code with the kernels or SDPA.
    """
    group = q.shape[1] // k.shape[1]
    qf = q.float().transpose(0, 1)  # [H, M, D]
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)  # [H, N, D]
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
    scores = torch.matmul(qf, kf.transpose(1, 2)) * scale  # [H, M, N]
    query_pos = first_query_pos + torch.arange(q.shape[0], device=q.device)
    key_pos = torch.arange(k.shape[0], device=q.device)
    visible = (key_pos[None, :] <= query_pos[:, None]) | (key_pos[None, :] < bidirectional_prefix)
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.matmul(weights, vf).transpose(0, 1).to(q.dtype)
