"""Attention over the paged KV pool with the Triton kernels of vla_kernels.

DECODE batches take the split-K decode kernel; EXTEND batches (prefill, chunks, and any decoding
requests mixed into them) take the extend kernel, which also widens the causal mask over
prefix-LM requests' bidirectional prefixes. Runs compiled on CUDA tensors and through the
Triton interpreter on CPU tensors when TRITON_INTERPRET=1 (tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vla_kernels.decode_attention import SplitKWorkspace, decode_attention, default_num_kv_splits
from vla_kernels.extend_attention import extend_attention
from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.attention.base import AttentionBackend
from vla_server.model.forward_batch import ForwardBatch, ForwardMode


@dataclass
class _BatchMetadata:
    batch: ForwardBatch
    max_seq_len: int
    max_extend_len: int
    num_kv_splits: int
    # Split-K scratch, allocated at the first layer and reused by the others.
    workspace: SplitKWorkspace | None = None


class TritonAttentionBackend(AttentionBackend):
    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        kv_pool: TokenToKVPool,
        num_kv_splits: int | None = None,
    ):
        super().__init__(req_to_token_pool, kv_pool)
        self.num_kv_splits = num_kv_splits
        self._meta: _BatchMetadata | None = None

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        max_seq_len = max(batch.seq_lens_cpu, default=0)
        splits = self.num_kv_splits or default_num_kv_splits(
            batch.batch_size, self.kv_pool.num_kv_heads, max_seq_len, batch.out_cache_loc.device
        )
        max_extend_len = max(batch.extend_lens_cpu, default=0)
        self._meta = _BatchMetadata(batch, max_seq_len, max_extend_len, splits)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        scale: float,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        if self._meta is None or self._meta.batch is not batch:
            self.init_forward_metadata(batch)
        meta = self._meta
        assert meta is not None
        # The kernels multiply q with the pool's K, so q takes the pool's dtype for the call.
        q_pool = _contiguous_heads(q.to(self.kv_pool.dtype))
        req_to_token = self.req_to_token_pool.req_to_token
        if batch.mode is ForwardMode.DECODE:
            out = decode_attention(
                q_pool, k_cache, v_cache, req_to_token, batch.req_pool_indices,
                batch.seq_lens, scale, new_token_slots=batch.out_cache_loc,
                max_seq_len=meta.max_seq_len, num_kv_splits=meta.num_kv_splits,
                workspace=self._workspace(meta, q_pool),
            )  # fmt: skip
        else:
            out = extend_attention(
                q_pool, _contiguous_heads(k.to(self.kv_pool.dtype)),
                _contiguous_heads(v.to(self.kv_pool.dtype)), k_cache, v_cache, req_to_token,
                batch.req_pool_indices, batch.prefix_lens, batch.extend_lens,
                batch.extend_start_loc, scale, prefix_lm_lens=batch.prefix_lm_lens,
                max_extend_len=meta.max_extend_len,
            )  # fmt: skip
        return out.to(q.dtype)

    @staticmethod
    def _workspace(meta: _BatchMetadata, q: torch.Tensor) -> SplitKWorkspace:
        batch, num_q_heads, head_dim = q.shape
        ws = meta.workspace
        if ws is None or ws.partial_out.shape != (batch, num_q_heads, meta.num_kv_splits, head_dim):
            splits = meta.num_kv_splits
            ws = SplitKWorkspace.allocate(batch, num_q_heads, splits, head_dim, q.device)
            meta.workspace = ws
        return ws


def _contiguous_heads(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()
