"""What one forward pass needs to know about the batch, in tensors.

A batch is a list of requests; request ``i`` already has ``prefix_lens[i]`` tokens in the KV pool
and brings ``extend_lens[i]`` new tokens (1 for a decoding request). The new tokens of all
requests are concatenated into one ragged token axis of length ``num_tokens``.

A prefix-LM request (a backbone that reads its prompt both ways) also has a bidirectional
prefix of ``prefix_lm_lens[i]`` tokens:
a token at position p sees every token before ``max(p + 1, prefix_lm_lens[i])``. Its tokens
after that prefix may sit one or more RoPE positions further on (openpi's decode convention),
which ``positions`` already includes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

import torch


class ForwardMode(Enum):
    EXTEND = auto()  # at least one request brings more than its next token (prefill, chunk)
    DECODE = auto()  # every request brings exactly one token


@dataclass
class ForwardBatch:
    mode: ForwardMode
    batch_size: int
    # [num_tokens] new token ids; image/embedding positions may hold pad ids (see input_embeds)
    input_ids: torch.Tensor
    # [num_tokens] RoPE position of each new token (its index in the request's sequence, plus
    # the request's position shift past a prefix-LM prefix)
    positions: torch.Tensor
    # [batch_size] rows of ReqToTokenPool.req_to_token
    req_pool_indices: torch.Tensor
    # [batch_size] sequence length after this forward (prefix + extend)
    seq_lens: torch.Tensor
    # [batch_size] tokens already in the KV pool before this forward
    prefix_lens: torch.Tensor
    # [batch_size] new tokens per request
    extend_lens: torch.Tensor
    # [batch_size] offset of each request's first new token on the token axis
    extend_start_loc: torch.Tensor
    # [num_tokens] KV slot each new token's K/V is written to
    out_cache_loc: torch.Tensor
    # Python copies of the lengths, so backends can loop without device syncs
    seq_lens_cpu: list[int]
    prefix_lens_cpu: list[int]
    extend_lens_cpu: list[int]
    # Optional [num_tokens, hidden] embeddings that replace the token embedding where
    # input_embeds_mask is True (caller embeddings, projected image features).
    input_embeds: torch.Tensor | None = None
    input_embeds_mask: torch.Tensor | None = None
    # [batch_size] bidirectional prefix length per request (0: causal); None when the batch has
    # no prefix-LM request. The attention backends read them.
    prefix_lm_lens: torch.Tensor | None = None
    prefix_lm_lens_cpu: list[int] | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def last_token_index(self) -> torch.Tensor:
        """Index on the token axis of each request's last new token."""
        return self.extend_start_loc + self.extend_lens - 1
