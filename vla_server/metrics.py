"""Prometheus collectors of the main process (one registry per TokenizerManager).

Latency buckets are fine-grained between 1 ms and 200 ms: a 10-100 Hz control loop has a
10-100 ms budget per step, and P99 inside that band is what an operator watches.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTROL_LOOP_BUCKETS = (
    0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.010,
    0.0125, 0.015, 0.0175, 0.020, 0.0225, 0.025, 0.030, 0.035, 0.040, 0.045, 0.050,
    0.060, 0.070, 0.080, 0.090, 0.100, 0.125, 0.150, 0.175, 0.200,
    0.250, 0.300, 0.400, 0.500, 0.750, 1.0, 2.0, 5.0, 10.0, 30.0,
)  # fmt: skip


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "vla_time_to_first_token_seconds",
            "Time to first token",
            buckets=CONTROL_LOOP_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "vla_inter_token_latency_seconds",
            "Gap between outputs divided by their new tokens, one sample per token",
            buckets=CONTROL_LOOP_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "vla_e2e_request_latency_seconds",
            "End-to-end latency",
            buckets=CONTROL_LOOP_BUCKETS,
            registry=r,
        )
        self.ttfa = Histogram(
            "vla_time_to_first_action_seconds",
            "Request arrival to its first completed action vector",
            buckets=CONTROL_LOOP_BUCKETS,
            registry=r,
        )
        self.mm_cache_hits = Gauge(
            "vla_mm_embedding_cache_hits",
            "Images served from the vision-embedding cache",
            registry=r,
        )
        self.mm_cache_misses = Gauge(
            "vla_mm_embedding_cache_misses", "Images that went through the vision tower", registry=r
        )
        self.queue_time = Histogram(
            "vla_queue_time_seconds",
            "Scheduler arrival to first forward",
            buckets=CONTROL_LOOP_BUCKETS,
            registry=r,
        )
        self.num_running = Gauge(
            "vla_num_running_reqs", "Requests in the running batch", registry=r
        )
        self.num_waiting = Gauge(
            "vla_num_queue_reqs", "Requests waiting in the scheduler", registry=r
        )
        self.kv_used = Gauge("vla_kv_used_tokens", "KV pool tokens in use", registry=r)
        self.prompt_tokens = Counter(
            "vla_prompt_tokens", "Prompt tokens of finished requests", registry=r
        )
        self.generation_tokens = Counter("vla_generation_tokens", "Generated tokens", registry=r)
        self.requests = Counter(
            "vla_requests", "Finished requests by finish type", ["finish"], registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
