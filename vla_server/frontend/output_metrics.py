"""The latency metrics of one output as the main process receives it (per priority label)."""

from __future__ import annotations

import time
from typing import Any

from vla_server.frontend.req_state import ReqState
from vla_server.metrics import ServerMetrics


def observe_output(
    m: ServerMetrics, state: ReqState, meta: Any, n_new: int, finish: dict[str, Any] | None
) -> None:
    """TTFT, inter-token gaps, queue time, and at the finish end-to-end latency and counters."""
    now = time.perf_counter()
    prio = str(state.item.priority)
    if meta.queue_steps is not None:
        state.queue_steps = meta.queue_steps
    if meta.queue_time is not None:
        state.queue_time = meta.queue_time
        m.queue_time.labels(prio).observe(meta.queue_time)
    if n_new:
        if state.first_token_time is None:
            state.first_token_time = now
            m.ttft.labels(prio).observe(now - state.created)
        elif state.last_output_time is not None:
            gap = (now - state.last_output_time) / n_new
            for _ in range(n_new):
                m.itl.labels(prio).observe(gap)
        state.last_output_time = now
        m.generation_tokens.inc(n_new)
    if finish is not None:
        m.e2e.labels(prio).observe(now - state.created)
        m.prompt_tokens.inc(meta.prompt_tokens)
        kind = finish.get("type", "unknown")
        m.requests.labels(finish=kind, priority=prio).inc()
        if kind == "deadline":
            m.deadline_misses.labels(prio).inc()
