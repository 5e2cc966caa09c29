"""The soak benchmark's bookkeeping, free of I/O: what became of each request, per-minute
latency and memory, and the memory slope."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_harness.stats import pct

# What a request ended as. A finish reason is a result; a 4xx is an answer; a client that left
# on purpose (mid-stream disconnects, cut-off stalled readers) expects nothing. Anything else
# (a 5xx, a transport error, a stream that ended without its final chunk) is lost.
OK = "ok"
ABORTED = "aborted"
CLIENT_ERROR = "4xx"
CLIENT_LEFT = "client_left"
CUT_OFF = "cut_off"
TRANSPORT_ERROR = "transport_error"
INCOMPLETE = "incomplete"
ANSWERED = frozenset({OK, ABORTED, CLIENT_ERROR, CLIENT_LEFT, CUT_OFF})


@dataclass(frozen=True)
class Outcome:
    kind: str  # the client: robot, bad_input, disconnect, abort, stalled_reader
    start: float  # seconds since the run began
    latency: float  # seconds to the answer (or to leaving)
    result: str  # one of the classes above, `http_<status>`, or `finish_<type>`
    phase: str = "soak"


def classify(status: int | None, finish: str | None, error: str | None = None) -> str:
    """The class of one request from its HTTP status, its final finish type, or the
    transport error that ended it."""
    if error is not None:
        return TRANSPORT_ERROR
    if status is None:
        return INCOMPLETE
    if 400 <= status < 500:
        return CLIENT_ERROR
    if status != 200:
        return f"http_{status}"
    if finish is None:
        return INCOMPLETE
    if finish in ("length", "stop"):
        return OK
    return ABORTED if finish == "abort" else f"finish_{finish}"


def is_lost(result: str) -> bool:
    """Neither a result nor a 4xx, and not a client that left on purpose."""
    return result not in ANSWERED and not result.startswith("finish_")


def results_by_kind(outcomes: Iterable[Outcome]) -> dict[str, dict[str, int]]:
    """Per client kind, how many requests ended as each class, plus `lost`."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        counts[o.kind][o.result] += 1
        counts[o.kind]["lost"] += is_lost(o.result)
    return {kind: dict(c) for kind, c in sorted(counts.items())}


def minute_of(t: float) -> int:
    return int(t // 60)


def per_minute_latency(outcomes: Sequence[Outcome], minutes: int) -> list[dict[str, Any]]:
    """P50/P99 (ms) and counts of the answered requests started in each minute."""
    by_minute: dict[int, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_minute[minute_of(o.start)].append(o)
    rows = []
    for m in range(minutes):
        done = [o.latency for o in by_minute[m] if o.result == OK]
        rows.append(
            {
                "minute": m,
                "requests": len(by_minute[m]),
                "ok": len(done),
                "lost": sum(is_lost(o.result) for o in by_minute[m]),
                "p50_ms": pct(done, 50) * 1e3,
                "p99_ms": pct(done, 99) * 1e3,
            }
        )
    return rows


def per_minute_mean(samples: Sequence[tuple[float, float]], minutes: int) -> list[float]:
    """The mean of the (time s, value) samples taken in each minute (NaN: none)."""
    by_minute: dict[int, list[float]] = defaultdict(list)
    for t, v in samples:
        by_minute[minute_of(t)].append(v)
    return [float(np.mean(by_minute[m])) if by_minute[m] else float("nan") for m in range(minutes)]


def slope_per_minute(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (time s, value) samples, in value units per minute (NaN with
    fewer than two distinct times)."""
    if len({t for t, _ in samples}) < 2:
        return float("nan")
    t = np.asarray([s[0] for s in samples], dtype=np.float64) / 60.0
    v = np.asarray([s[1] for s in samples], dtype=np.float64)
    return float(np.polyfit(t, v, 1)[0])


def latency_ratio(outcomes: Sequence[Outcome], loaded: str, base: str, q: float = 50) -> float:
    """The q-th percentile latency of OK requests in phase `loaded` over that in `base`."""

    def q_of(phase: str) -> float:
        return pct([o.latency for o in outcomes if o.phase == phase and o.result == OK], q)

    return q_of(loaded) / q_of(base)
