"""Prometheus collectors of the main process (one registry per TokenizerManager).

Latency buckets are fine-grained between 1 ms and 200 ms: a 10-100 Hz control loop has a
10-100 ms budget per step, and P99 inside that band is what an operator watches. Latencies,
finishes and deadline misses carry the request's priority as a label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from vla_server.io_struct import SchedulerStats

CONTROL_LOOP_BUCKETS = (
    0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.010,
    0.0125, 0.015, 0.0175, 0.020, 0.0225, 0.025, 0.030, 0.035, 0.040, 0.045, 0.050,
    0.060, 0.070, 0.080, 0.090, 0.100, 0.125, 0.150, 0.175, 0.200,
    0.250, 0.300, 0.400, 0.500, 0.750, 1.0, 2.0, 5.0, 10.0, 30.0,
)  # fmt: skip

# name -> (help, labelled by priority)
_LATENCIES = {
    "ttft": ("vla_time_to_first_token_seconds", "Time to first token"),
    "itl": (
        "vla_inter_token_latency_seconds",
        "Gap between outputs divided by their new tokens, one sample per token",
    ),
    "e2e": ("vla_e2e_request_latency_seconds", "End-to-end latency"),
    "ttfa": (
        "vla_time_to_first_action_seconds",
        "Request arrival to its first completed action vector",
    ),
    "queue_time": ("vla_queue_time_seconds", "Scheduler arrival to first forward"),
}
_GAUGES = {
    "num_running": ("vla_num_running_reqs", "Requests in the running batch"),
    "num_waiting": ("vla_num_queue_reqs", "Requests waiting in the scheduler"),
    "kv_used": ("vla_kv_used_tokens", "KV tokens held by requests and sessions"),
    "kv_cached": ("vla_kv_cached_tokens", "KV tokens of reusable cached prefixes"),
    "cache_hit_rate": ("vla_cache_hit_rate", "Prompt tokens served from the radix cache, share"),
    "retractions": ("vla_num_retractions", "Requests preempted or retracted so far"),
    "mm_cache_hits": ("vla_mm_embedding_cache_hits", "Images served from the embedding cache"),
    "mm_cache_misses": ("vla_mm_embedding_cache_misses", "Images through the vision tower"),
}
# Where each image of a prefill got its embeddings; `source` is one of these.
MM_IMAGE_SOURCES = ("prefix_cache", "embedding_cache", "vision_tower")


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        for attr, (name, doc) in _LATENCIES.items():
            setattr(
                self,
                attr,
                Histogram(name, doc, ["priority"], buckets=CONTROL_LOOP_BUCKETS, registry=r),
            )
        for attr, (name, doc) in _GAUGES.items():
            setattr(self, attr, Gauge(name, doc, registry=r))
        self.prompt_tokens = Counter(
            "vla_prompt_tokens", "Prompt tokens of finished requests", registry=r
        )
        self.generation_tokens = Counter("vla_generation_tokens", "Generated tokens", registry=r)
        self.requests = Counter(
            "vla_requests", "Finished requests by finish type", ["finish", "priority"], registry=r
        )
        # Cumulative scheduler counts mirrored as gauges, like the cache hits and misses above.
        self.mm_images = Gauge(
            "vla_mm_images",
            "Images prefilled so far by where their embeddings came from: prefix_cache (all "
            "positions in the radix cache, nothing computed), embedding_cache, vision_tower",
            ["source"],
            registry=r,
        )
        for source in MM_IMAGE_SOURCES:
            self.mm_images.labels(source)  # exported as 0 before the first image
        self.http_requests = Counter(
            "vla_http_requests",
            "HTTP requests answered, by route (its template; `unmatched`: no route) and status",
            ["route", "status"],
            registry=r,
        )
        self.slow_client_aborts = Counter(
            "vla_slow_client_aborts",
            "Connections closed on a slow or stalled client: phase `request`, its request did not "
            "arrive within --request-read-timeout; `response`, it did not read its response for "
            "--send-timeout (its request is aborted)",
            ["phase"],
            registry=r,
        )
        for phase in ("request", "response"):
            self.slow_client_aborts.labels(phase)  # exported as 0 before the first
        self.held_steps = Counter(
            "vla_held_steps",
            "Steps less important requests were held out of by priority isolation "
            "(--realtime-priority), one per request and step",
            registry=r,
        )
        self._held_seen = 0  # the scheduler's cumulative count, as of the latest stats
        self.deadline_misses = Counter(
            "vla_deadline_misses",
            "Requests ended because of their deadline",
            ["priority"],
            registry=r,
        )

    def observe_mm(self, stats: SchedulerStats) -> None:
        self.mm_cache_hits.set(stats.mm_cache_hits)
        self.mm_cache_misses.set(stats.mm_cache_misses)
        counts = (stats.mm_prefix_cache_images, stats.mm_cache_hits, stats.mm_cache_misses)
        for source, n in zip(MM_IMAGE_SOURCES, counts, strict=True):
            self.mm_images.labels(source).set(n)

    def observe_held(self, stats: SchedulerStats) -> None:
        self.held_steps.inc(max(stats.held_steps - self._held_seen, 0))
        self._held_seen = max(stats.held_steps, self._held_seen)

    def render(self) -> bytes:
        return generate_latest(self.registry)
