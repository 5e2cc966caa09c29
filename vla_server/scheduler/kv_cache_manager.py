"""KV memory of requests: req->token rows, KV slots, and the radix prefix cache.

Lifecycle of a request's KV: `admit` matches the longest cached prefix (those slots stay the
tree's, locked while the request uses them) and gives the request a row; `alloc` hands out slots
for newly scheduled tokens, evicting unreferenced cached prefixes when the pool runs short;
`release` hands everything computed to the tree (so a retracted request, or the next turn of a
session, finds it again) and frees the row.
"""

from __future__ import annotations

import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.mem_cache.radix_cache import RadixCache
from vla_server.scheduler.req import Req


class KVCacheManager:
    def __init__(
        self, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool, disable_radix: bool
    ):
        self.req_to_token_pool = req_to_token_pool
        self.req_to_token = req_to_token_pool.req_to_token
        self.allocator = kv_pool.allocator
        self.total_tokens = kv_pool.size
        self.tree = RadixCache(self.allocator, disable=disable_radix)

    # ---- sizes -------------------------------------------------------------------------------

    def free_tokens(self) -> int:
        return self.allocator.available_size()

    def available_tokens(self) -> int:
        """Free slots plus cached prefixes nobody holds (evictable on demand)."""
        return self.free_tokens() + self.tree.evictable_size()

    def used_tokens(self) -> int:
        """Slots held by requests and pinned sessions (not free, not merely cached)."""
        return self.total_tokens - self.available_tokens()

    def free_rows(self) -> int:
        return self.req_to_token_pool.available_size()

    # ---- request lifecycle -------------------------------------------------------------------

    def match(self, req: Req) -> tuple[torch.Tensor, object]:
        """The longest cached prefix `req` may reuse (at least one token stays to compute,
        for its logits; a denoising request takes none from its prompt, so all of it may be
        cached)."""
        if not req.cacheable:
            return self.tree.match_prefix([]).indices, self.tree.root
        limit = req.seq_len - (req.denoise is None)
        if req.return_logprob and req.logprob_start_len >= 0:
            limit = min(limit, max(req.logprob_start_len - 1, 0))  # scored tokens need logits
        m = self.tree.match_prefix(req.cache_key(limit))
        return m.indices, m.last_node

    def admit(self, req: Req, prefix: torch.Tensor, node: object) -> None:
        row = self.req_to_token_pool.alloc()
        assert row is not None, "admission checked the free rows"
        req.req_pool_idx = row
        n = int(prefix.numel())
        self.req_to_token[row, :n] = prefix.to(self.req_to_token.dtype)
        req.kv_len = n
        req.last_node = node  # type: ignore[assignment]
        self.tree.inc_lock_ref(req.last_node)
        if req.num_retractions == 0:
            req.cached_tokens = n
            self.tree.stats.record(n, req.seq_len)

    def alloc(self, n: int) -> torch.Tensor | None:
        slots = self.allocator.alloc(n)
        if slots is None:
            self.tree.evict(n - self.free_tokens())
            slots = self.allocator.alloc(n)
        return slots

    def token_slots(self, req: Req) -> torch.Tensor:
        return self.req_to_token[req.req_pool_idx, : req.kv_len].to(torch.int64)

    def release(self, req: Req) -> None:
        """Hand the request's computed KV to the tree (or free it) and free its row."""
        if req.req_pool_idx is None:
            return
        slots = self.token_slots(req).clone()
        node = req.last_node if req.last_node is not None else self.tree.root
        if req.cacheable:
            self.tree.cache_finished(req.cache_key(req.kv_len), slots, node)
        else:
            self.tree.dec_lock_ref(node)
            self.allocator.free(slots)
        self.req_to_token_pool.free(req.req_pool_idx)
        req.req_pool_idx = None
        req.last_node = None
        req.kv_len = 0
        req.prefill_images.reset()  # image features of an unfinished prefill go with its KV

    def flush(self) -> None:
        self.tree.reset()
        self.req_to_token_pool.clear()
        self.allocator.clear()
