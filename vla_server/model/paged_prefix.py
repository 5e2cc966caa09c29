"""A batch of requests' prefix K/V in the paged pool, as an action head reads them.

An action head denoises over each request's prefix (its prompt's K/V, written by the prefill)
without writing anything back. `PagedPrefix` holds the slot index of every prefix token, padded
to the longest prefix (padding points at slot 0 and is masked by `valid`), so a layer's prefix
K/V are one gather, done once per `PagedPrefix`: a batch that takes several Euler steps over
the same prefixes reuses it (`memo`), as it reuses what a head derives from the prefixes alone
(its attention mask).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool


@dataclass
class PagedPrefix:
    kv_pool: TokenToKVPool
    kv_index: torch.Tensor  # [B, P] int64 slots, P the longest prefix; padding -> slot 0
    valid: torch.Tensor  # [B, P] bool: a real prefix token
    lens: torch.Tensor  # [B] int64 prefix lengths
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        req_to_token_pool: ReqToTokenPool,
        kv_pool: TokenToKVPool,
        rows: Sequence[int],
        prefix_lens: Sequence[int],
    ) -> PagedPrefix:
        """Requests in `rows` of `req_to_token`, with `prefix_lens` tokens in the pool."""
        device = req_to_token_pool.req_to_token.device
        lens = torch.tensor(prefix_lens, dtype=torch.int64, device=device)
        longest = max(prefix_lens)
        row_index = torch.tensor(rows, dtype=torch.int64, device=device)
        kv_index = req_to_token_pool.req_to_token[row_index, :longest].to(torch.int64)
        valid = torch.arange(longest, device=device)[None, :] < lens[:, None]
        return cls(kv_pool, kv_index.masked_fill(~valid, 0), valid, lens)

    @property
    def batch_size(self) -> int:
        return int(self.kv_index.shape[0])

    def kv(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer_id`'s prefix keys and values, each [B, P, kv_heads, head_dim]."""
        return self.memo(("kv", layer_id), lambda: self._gather(layer_id))

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """`build()`'s value, computed on the first call with `key`: something derived from
        these prefixes alone, which the pool does not change while their requests hold them."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    def _gather(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        k_cache, v_cache = self.kv_pool.get_kv(layer_id)
        return k_cache[self.kv_index], v_cache[self.kv_index]
