"""The vision-embedding LRU: byte budget, recency, admission and counters."""

from __future__ import annotations

import torch

from vla_server.multimodal.embedding_cache import EmbeddingCache


def emb(n_bytes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    itemsize = torch.tensor([], dtype=dtype).element_size()
    return torch.zeros(n_bytes // itemsize, dtype=dtype)


def test_evicts_least_recently_used_to_fit_the_budget():
    cache = EmbeddingCache(budget_bytes=300)
    for key in (1, 2, 3):
        assert cache.put(key, emb(100))
    assert cache.get(1) is not None  # 1 is now the most recent, 2 the least
    assert cache.put(4, emb(100))
    assert 2 not in cache and all(k in cache for k in (1, 3, 4))
    assert cache.put(5, emb(200))  # needs two slots: evicts 3, then 1
    assert [k for k in (1, 3, 4, 5) if k in cache] == [4, 5]
    stats = cache.stats()
    assert (stats.evictions, stats.items, stats.bytes, stats.budget_bytes) == (3, 2, 300, 300)


def test_bytes_follow_dtype_and_shape():
    cache = EmbeddingCache(budget_bytes=10_000)
    cache.put(1, torch.zeros(4, 8, dtype=torch.float32))
    cache.put(2, torch.zeros(4, 8, dtype=torch.bfloat16))
    cache.put(3, torch.zeros(3, dtype=torch.int64))
    assert cache.stats().bytes == 128 + 64 + 24


def test_item_larger_than_the_budget_is_not_admitted_and_evicts_nothing():
    cache = EmbeddingCache(budget_bytes=256)
    cache.put(1, emb(128))
    assert not cache.put(2, emb(260))
    assert 1 in cache and 2 not in cache
    stats = cache.stats()
    assert (stats.rejected, stats.evictions, stats.bytes) == (1, 0, 128)
    assert not EmbeddingCache(budget_bytes=0).put(1, emb(4))


def test_replacing_a_key_updates_bytes_without_counting_an_eviction():
    cache = EmbeddingCache(budget_bytes=400)
    cache.put(1, emb(100))
    cache.put(2, emb(100))
    replacement = emb(300)
    assert cache.put(1, replacement)  # 100 + 300 fit once the old 1 is gone
    assert cache.get(1) is replacement
    stats = cache.stats()
    assert (stats.bytes, stats.items, stats.evictions) == (400, 2, 0)


def test_hit_and_miss_counters_and_contains_is_neutral():
    cache = EmbeddingCache.from_mb(1)
    assert cache.budget_bytes == 1024 * 1024
    tensor = emb(64)
    cache.put(7, tensor)
    assert cache.get(7) is tensor
    assert cache.get(8) is None
    assert 7 in cache and 8 not in cache
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (1, 1)
    cache.clear()
    assert len(cache) == 0 and cache.stats().bytes == 0 and cache.get(7) is None
