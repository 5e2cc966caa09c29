"""Where a node's image embeddings came from (prefix cache, embedding cache, vision tower)."""

from __future__ import annotations

from tests.support.server import metric_by_label, metric_value
from vla_harness.server_subprocess import ServerProcess


def sources(prefix: int = 0, cache: int = 0, tower: int = 0) -> dict[str, int]:
    return {"prefix_cache": prefix, "embedding_cache": cache, "vision_tower": tower}


def image_sources(server: ServerProcess) -> dict[str, int]:
    """Images so far by where their embeddings came from, checked to agree across
    /get_server_info (front end and scheduler views), the hit/miss fields and /metrics."""
    info = server.client().get("/get_server_info").json()
    served = info["mm"]["embedding_cache"]
    assert info["internal_states"][0]["mm_embedding_cache"] == served
    counts = served["images"]
    assert set(counts) == set(sources())
    assert (served["hits"], served["misses"]) == (counts["embedding_cache"], counts["vision_tower"])
    assert metric_by_label(server, "vla_mm_images", "source") == counts
    assert metric_value(server, "vla_mm_embedding_cache_hits") == served["hits"]
    assert metric_value(server, "vla_mm_embedding_cache_misses") == served["misses"]
    return counts


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}
