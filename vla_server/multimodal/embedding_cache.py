"""An LRU cache of vision-tower outputs keyed by the 128-bit image hash, bounded in bytes.

Owned by the scheduler (one thread); not thread-safe. An entry's size is the tensor's
``numel * element_size`` (the memory it pins, on whatever device it lives).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EmbeddingCacheStats:
    hits: int
    misses: int
    evictions: int
    rejected: int  # puts refused because the item alone exceeds the budget
    items: int
    bytes: int
    budget_bytes: int


class EmbeddingCache:
    def __init__(self, budget_bytes: int):
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = self._rejected = 0

    @classmethod
    def from_mb(cls, mm_embedding_cache_mb: float) -> EmbeddingCache:
        return cls(int(mm_embedding_cache_mb * 1024 * 1024))

    def get(self, key: int) -> torch.Tensor | None:
        """The cached embedding (now most recently used), counting a hit or a miss."""
        tensor = self._entries.get(key)
        if tensor is None:
            self._misses += 1
            return None
        self._hits += 1
        self._entries.move_to_end(key)
        return tensor

    def put(self, key: int, tensor: torch.Tensor) -> bool:
        """Insert (or replace) ``key``, evicting least recently used entries to fit.

        Returns False, leaving the cache unchanged, when the tensor alone exceeds the budget.
        """
        size = _nbytes(tensor)
        if size > self.budget_bytes:
            self._rejected += 1
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= _nbytes(old)
        while self._bytes + size > self.budget_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= _nbytes(evicted)
            self._evictions += 1
        self._entries[key] = tensor
        self._bytes += size
        return True

    def __contains__(self, key: int) -> bool:
        """Membership without touching recency or the hit/miss counters."""
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def stats(self) -> EmbeddingCacheStats:
        return EmbeddingCacheStats(
            hits=self._hits,
            misses=self._misses,
            evictions=self._evictions,
            rejected=self._rejected,
            items=len(self._entries),
            bytes=self._bytes,
            budget_bytes=self.budget_bytes,
        )


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
