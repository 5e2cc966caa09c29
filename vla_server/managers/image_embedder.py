"""Vision embeddings for the image positions of a prefill, through the LRU embedding cache.

Identical images (same 128-bit hash) cost nothing after the first time: the cached projected
features are reused and the vision tower is skipped. All misses of one batch go through a single
tower call.
"""

from __future__ import annotations

import torch

from vla_server.io_struct import MMItem
from vla_server.model.model_runner import ModelRunner
from vla_server.multimodal.embedding_cache import EmbeddingCache


class ImageEmbedder:
    def __init__(self, runner: ModelRunner, cache_mb: float):
        self.runner = runner
        self.cache = EmbeddingCache.from_mb(cache_mb)
        self.hits = 0
        self.misses = 0

    def lookup(self, items: list[MMItem]) -> dict[str, torch.Tensor]:
        """Embedding [length, hidden] of each distinct image (by hash) among `items`."""
        found: dict[str, torch.Tensor] = {}
        missing: dict[str, MMItem] = {}
        for item in items:
            if item.hash in found or item.hash in missing:
                continue
            cached = self.cache.get(int(item.hash, 16))
            if cached is not None:
                found[item.hash] = cached
                self.hits += 1
            else:
                missing[item.hash] = item
        if missing:
            self.misses += len(missing)
            embs = self.runner.encode_images(
                [it.pixel_values.to_numpy() for it in missing.values()]
            )
            for (key, item), emb in zip(missing.items(), embs, strict=True):
                if emb.shape[0] != item.length:
                    raise ValueError(
                        f"image {key}: {emb.shape[0]} features for {item.length} positions"
                    )
                self.cache.put(int(key, 16), emb)
                found[key] = emb
        return found

    def clear(self) -> None:
        self.cache.clear()
