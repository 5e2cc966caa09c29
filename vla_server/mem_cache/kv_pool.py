"""Preallocated KV memory: a request->token table and a token-granular K/V pool.

Layout (the contract every attention backend and kernel relies on):

* ``ReqToTokenPool.req_to_token``: int32 ``[max_requests, max_context_len]``; row ``r`` holds, for
  each position of request ``r``'s sequence, the index of the KV slot that stores that token.
* ``TokenToKVPool.k_buffer[layer]`` / ``v_buffer[layer]``: ``[size + 1, num_kv_heads, head_dim]``.
  Slot 0 is never handed out: padded positions point at it, so a stray write lands nowhere that
  matters and gathers through padding stay in bounds.

Everything is allocated once at start-up; the decode hot path only indexes into these tensors.
"""

from __future__ import annotations

import torch


class ReqToTokenPool:
    """Rows of the request->token table, handed out one per running request."""

    def __init__(self, max_requests: int, max_context_len: int, device: str | torch.device = "cpu"):
        self.max_requests = max_requests
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros(
            (max_requests, max_context_len), dtype=torch.int32, device=device
        )
        self._free_rows: list[int] = list(range(max_requests))

    def available_size(self) -> int:
        return len(self._free_rows)

    def alloc(self) -> int | None:
        return self._free_rows.pop() if self._free_rows else None

    def free(self, row: int) -> None:
        self._free_rows.append(row)

    def clear(self) -> None:
        self._free_rows = list(range(self.max_requests))


class TokenSlotAllocator:
    """Hands out KV slot indices (1..size) and takes them back; slot 0 is the padding slot."""

    def __init__(self, size: int, device: str | torch.device = "cpu"):
        self.size = size
        self.device = device
        self.clear()

    # Freed slots wait in a short list and are merged in one cat: often enough that neither the
    # list nor the merge grows with uptime (a decode step frees one small tensor per request).
    MERGE_EVERY = 128

    def clear(self) -> None:
        self._free = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
        self._pending_free: list[torch.Tensor] = []
        self._pending_count = 0

    def available_size(self) -> int:
        return int(self._free.numel()) + self._pending_count

    def alloc(self, n: int) -> torch.Tensor | None:
        if n > self._free.numel():
            self._merge_pending()
            if n > self._free.numel():
                return None
        out = self._free[:n]
        self._free = self._free[n:]
        return out

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._pending_free.append(slots.to(torch.int64))
            self._pending_count += int(slots.numel())
            if len(self._pending_free) >= self.MERGE_EVERY:
                self._merge_pending()

    def _merge_pending(self) -> None:
        if self._pending_free:
            self._free = torch.cat([self._free, *self._pending_free])
            self._pending_free = []
            self._pending_count = 0


class TokenToKVPool:
    """Per-layer K and V buffers indexed by KV slot."""

    def __init__(
        self,
        size: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | torch.device = "cpu",
    ):
        self.size = size
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        shape = (size + 1, num_kv_heads, head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.allocator = TokenSlotAllocator(size, device)

    @staticmethod
    def bytes_per_token(
        num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        return (
            2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        )

    def set_kv(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k_buffer[layer_id][loc] = k.to(self.dtype)
        self.v_buffer[layer_id][loc] = v.to(self.dtype)

    def get_kv(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_buffer[layer_id], self.v_buffer[layer_id]
