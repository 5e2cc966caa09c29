"""Vision embeddings for the image positions of a prefill, through the LRU embedding cache.

Identical images (same 128-bit hash) cost nothing after the first time: the cached projected
features are reused and the vision tower is skipped. All misses of one batch go through a single
tower call.

Each image of a request is resolved once per prefill, in the first chunk that reaches it, and
counted by where its embeddings came from: the request's cached prefix already held all its
positions (nothing to compute), the embedding cache, or the vision tower. Its features stay on
the request (`Req.prefill_images`) for the later chunks that cover it.
"""

from __future__ import annotations

from typing import Any

import torch

from vla_server.io_struct import MMItem
from vla_server.metrics import MM_IMAGE_SOURCES
from vla_server.model.model_runner import ModelRunner
from vla_server.multimodal.embedding_cache import EmbeddingCache
from vla_server.multimodal.prefill_images import PrefillImages
from vla_server.scheduler.req import Req


class ImageEmbedder:
    def __init__(self, runner: ModelRunner, cache_mb: float):
        self.runner = runner
        self.cache = EmbeddingCache.from_mb(cache_mb)
        self.hits = 0  # images served from the embedding cache
        self.misses = 0  # images encoded by the vision tower
        self.prefix_cached = 0  # images whose positions all came with the cached prefix

    def resolve(self, spans: list[tuple[Req, int, int]]) -> None:
        """Put the features of every image overlapping each request's new positions [lo, hi)
        into its prefill state, resolving (and counting) each image the first time it is
        reached; one lookup, so one vision-tower call, for the whole batch."""
        pending: list[tuple[PrefillImages, MMItem]] = []
        for r, lo, hi in spans:
            state = r.prefill_images
            for i in state.unresolved(r.mm_items, hi):
                state.resolved.add(i)
                item = r.mm_items[i]
                if item.offset + item.length <= lo:
                    self.prefix_cached += 1
                else:
                    pending.append((state, item))
        if pending:
            found = self.lookup([item for _, item in pending])
            for state, item in pending:
                state.features[item.hash] = found[item.hash]

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

    def state(self) -> dict[str, Any]:
        """Counters and cache occupancy, as the control plane reports them."""
        st = self.cache.stats()
        return {
            "hits": self.hits,
            "misses": self.misses,
            "items": st.items,
            "bytes": st.bytes,
            "budget_bytes": st.budget_bytes,
            "evictions": st.evictions,
            "images": dict(
                zip(MM_IMAGE_SOURCES, (self.prefix_cached, self.hits, self.misses), strict=True)
            ),
        }
