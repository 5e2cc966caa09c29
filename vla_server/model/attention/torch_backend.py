"""Reference attention over the paged KV pool in plain torch (SDPA), for CPU serving and tests.

Decoding requests (one new token each) are batched: their K/V are gathered through
`req_to_token` into a padded [batch, max_seq_len] block and attended with a padding mask.
Requests that bring several tokens are attended one by one: the cached prefix gathered from the
pool plus the new tokens, with the causal mask shifted by the prefix length; a prefix-LM
request's tokens inside its bidirectional prefix also see the rest of that prefix. In an EXTEND
batch the one-token requests still take the batched decode path (a single new token sees exactly
what a causal mask shows it, wherever the prefix ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
import torch.nn.functional as F

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.attention.base import AttentionBackend
from vla_server.model.forward_batch import ForwardBatch, ForwardMode


@dataclass
class _DecodeGroup:
    token_index: torch.Tensor | None  # [b] rows of the token axis; None = the whole axis
    kv_index: torch.Tensor  # [b, max_seq_len] KV slots, padding -> slot 0
    mask: torch.Tensor  # [b, 1, 1, max_seq_len] additive: 0 on the sequence, -inf on padding


@dataclass
class _ExtendRequest:
    start: int  # first new token on the token axis
    end: int
    prefix_index: torch.Tensor | None  # [prefix_len] KV slots of the cached prefix
    mask: torch.Tensor | None  # additive [extend_len, prefix_len + extend_len]; None = causal


class TorchAttentionBackend(AttentionBackend):
    def __init__(self, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool):
        super().__init__(req_to_token_pool, kv_pool)
        self._decode: _DecodeGroup | None = None
        self._extends: list[_ExtendRequest] = []

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        if batch.mode is ForwardMode.DECODE:
            self._decode = self._decode_group(batch, list(range(batch.batch_size)), whole=True)
            self._extends = []
            return
        singles = [i for i, n in enumerate(batch.extend_lens_cpu) if n == 1]
        self._decode = self._decode_group(batch, singles, whole=False) if singles else None
        starts = [0, *accumulate(batch.extend_lens_cpu)]
        self._extends = [
            self._extend_request(batch, i, starts[i])
            for i, n in enumerate(batch.extend_lens_cpu)
            if n > 1
        ]

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
        group = self._decode
        if group is not None and group.token_index is None:
            return self._attend_decode(q, k_cache, v_cache, group, scale)
        out = torch.empty_like(q)
        if group is not None:
            q_group = q[group.token_index]
            out[group.token_index] = self._attend_decode(q_group, k_cache, v_cache, group, scale)
        for req in self._extends:
            out[req.start : req.end] = self._attend_extend(q, k, v, k_cache, v_cache, req, scale)
        return out

    @staticmethod
    def _attend_decode(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        group: _DecodeGroup,
        scale: float,
    ) -> torch.Tensor:
        keys = k_cache[group.kv_index].transpose(1, 2)  # [b, kv_heads, seq, head_dim]
        values = v_cache[group.kv_index].transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2), keys, values, attn_mask=group.mask, scale=scale, enable_gqa=True
        )
        return out.squeeze(2)

    @staticmethod
    def _attend_extend(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        req: _ExtendRequest,
        scale: float,
    ) -> torch.Tensor:
        keys, values = k[req.start : req.end], v[req.start : req.end]
        if req.prefix_index is not None:
            keys = torch.cat((k_cache[req.prefix_index], keys))
            values = torch.cat((v_cache[req.prefix_index], values))
        out = F.scaled_dot_product_attention(
            q[req.start : req.end].transpose(0, 1).unsqueeze(0),
            keys.transpose(0, 1).unsqueeze(0),
            values.transpose(0, 1).unsqueeze(0),
            attn_mask=req.mask,
            is_causal=req.mask is None,
            scale=scale,
            enable_gqa=True,
        )
        return out[0].transpose(0, 1)

    def _decode_group(self, batch: ForwardBatch, reqs: list[int], whole: bool) -> _DecodeGroup:
        device = batch.out_cache_loc.device
        max_len = max(batch.seq_lens_cpu[i] for i in reqs)
        index = None if whole else torch.tensor(reqs, dtype=torch.int64, device=device)
        rows = batch.req_pool_indices if index is None else batch.req_pool_indices[index]
        seq_lens = batch.seq_lens if index is None else batch.seq_lens[index]
        token_index = None if whole else batch.extend_start_loc[index]
        kv_index = self.req_to_token_pool.req_to_token[rows, :max_len].to(torch.int64)
        # The new token's slot comes from the batch, so the table row need not be written yet.
        new_slots = batch.out_cache_loc if whole else batch.out_cache_loc[token_index]
        kv_index[torch.arange(len(reqs), device=device), seq_lens - 1] = new_slots.to(torch.int64)
        valid = torch.arange(max_len, device=device)[None, :] < seq_lens[:, None]
        kv_index.masked_fill_(~valid, 0)
        return _DecodeGroup(token_index, kv_index, self._additive(valid[:, None, None, :]))

    def _extend_request(self, batch: ForwardBatch, i: int, start: int) -> _ExtendRequest:
        end = start + batch.extend_lens_cpu[i]
        prefix_len = batch.prefix_lens_cpu[i]
        bidirectional = batch.prefix_lm_lens_cpu[i] if batch.prefix_lm_lens_cpu else 0
        # Causal (SDPA's own mask) unless a new token before the prefix's end must see later ones.
        causal = bidirectional <= prefix_len + 1
        if prefix_len == 0 and causal:
            return _ExtendRequest(start, end, None, None)
        device = batch.out_cache_loc.device
        prefix_index = None
        if prefix_len:
            row = batch.req_pool_indices[i]
            prefix_index = self.req_to_token_pool.req_to_token[row, :prefix_len].to(torch.int64)
        keys = torch.arange(prefix_len + end - start, device=device)
        queries = torch.arange(prefix_len, prefix_len + end - start, device=device)
        last_seen = queries.clamp(min=bidirectional - 1)
        mask = self._additive(keys[None, :] <= last_seen[:, None])
        return _ExtendRequest(start, end, prefix_index, mask)

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        # Built once per batch: SDPA would convert a boolean mask again in every layer.
        mask = torch.zeros(allowed.shape, dtype=self.kv_pool.dtype, device=allowed.device)
        return mask.masked_fill_(~allowed, float("-inf"))
