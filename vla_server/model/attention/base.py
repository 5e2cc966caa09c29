"""The interface between the decoder layers and an attention implementation.

A backend is built once per model runner over the KV pools. Per forward it gets the batch
(`init_forward_metadata`), then each layer calls `forward` with this layer's new q/k/v, which
writes the new K/V into the pool at `batch.out_cache_loc`; the backend's `attend` then returns
attention over each request's whole sequence (cached prefix from the pool + the new tokens,
causal).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.forward_batch import ForwardBatch


class AttentionBackend(ABC):
    def __init__(self, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool):
        self.req_to_token_pool = req_to_token_pool
        self.kv_pool = kv_pool

    def init_forward_metadata(self, batch: ForwardBatch) -> None:  # noqa: B027 - optional hook
        """Precompute per-batch index tensors shared by all layers."""

    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_q_heads, head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        layer_id: int,
        scale: float,
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [num_tokens, num_q_heads, head_dim]
        self.kv_pool.set_kv(layer_id, batch.out_cache_loc, k, v)
        k_cache, v_cache = self.kv_pool.get_kv(layer_id)
        return self.attend(q, k, v, k_cache, v_cache, scale, batch)

    @abstractmethod
    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,  # this layer's pool, already holding the new K/V
        v_cache: torch.Tensor,
        scale: float,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Attention of each new token over its request's cached prefix and new tokens."""
