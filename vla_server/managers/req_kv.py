"""KV bookkeeping for requests: rows of the req->token table and slots of the K/V pool.

Allocation is batched per forward (one slice of the free list for all new tokens of a batch),
so the decode hot path allocates no per-request tensors.
"""

from __future__ import annotations

import torch

from vla_server.managers.req import Req
from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool


class ReqKVManager:
    def __init__(self, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool):
        self.req_to_token_pool = req_to_token_pool
        self.req_to_token = req_to_token_pool.req_to_token
        self.allocator = kv_pool.allocator
        self.total_tokens = kv_pool.size

    def free_tokens(self) -> int:
        return self.allocator.available_size()

    def used_tokens(self) -> int:
        return self.total_tokens - self.free_tokens()

    def alloc_rows(self, reqs: list[Req]) -> bool:
        if self.req_to_token_pool.available_size() < sum(r.req_pool_idx is None for r in reqs):
            return False
        for r in reqs:
            if r.req_pool_idx is None:
                r.req_pool_idx = self.req_to_token_pool.alloc()
        return True

    def alloc_tokens(self, n: int) -> torch.Tensor:
        slots = self.allocator.alloc(n)
        if slots is None:
            # Admission reserves every running request's remaining tokens, so this is a bug.
            raise RuntimeError(f"KV pool exhausted: {n} slots asked, {self.free_tokens()} free")
        return slots

    def token_slots(self, req: Req) -> torch.Tensor:
        return self.req_to_token[req.req_pool_idx, : req.kv_len].to(torch.int64)

    def release(self, req: Req) -> None:
        """Return everything the request holds; safe to call twice."""
        if req.req_pool_idx is None:
            return
        self.allocator.free(self.token_slots(req).clone())
        self.req_to_token_pool.free(req.req_pool_idx)
        req.req_pool_idx = None
        req.kv_len = 0
