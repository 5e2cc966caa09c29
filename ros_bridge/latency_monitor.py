"""Rolling latency windows, frame counters and the diagnostic levels they map to (ROS-free).

The bridge feeds this monitor from its worker thread; the diagnostics timer reads it from an
executor thread, hence the lock. `statuses()` closes a reporting period: "this period" counts
(bad frames, deadline misses) reset there, as diagnostic_updater's FrequencyStatus windows do,
so a node recovers to OK one period after a fault ends. Percentiles are over the last `window`
samples, linear interpolation between order statistics (numpy's default). A server that cannot
be reached or fails (5xx) is the "inference server" status; a server that answers but refuses the
requests (4xx: the request is wrong, e.g. no `unnorm_key`) is the "requests" status.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

METRICS = ("ttft", "itl", "time_to_first_action", "frame_to_action")
COUNTERS = (
    "frames_in",
    "frames_dropped_bad",
    "frames_superseded",
    "frames_stale",
    "frames_expired",
    "frames_failed",
    "frames_processed",
    "actions_published",
    "actions_late",
    "deadline_misses",
    "late_commands",
    "request_errors",
    "reconnects",
    "malformed_sse_lines",
)


class Level(IntEnum):
    """diagnostic_msgs/DiagnosticStatus levels."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3


@dataclass
class Budgets:
    deadline_ms: float = 500.0  # frame arrival -> first action
    ttft_budget_ms: float = 250.0  # P99 of request sent -> first token
    itl_p99_budget_ms: float = 100.0  # P99 of the gap between tokens
    stale_after_s: float = 2.0  # no camera frame for this long: STALE


@dataclass(frozen=True)
class StatusReport:
    """One diagnostic status, before it becomes a DiagnosticStatus message."""

    name: str
    level: Level
    message: str
    values: tuple[tuple[str, str], ...]


class RollingWindow:
    """The last `size` samples (milliseconds) of one latency."""

    def __init__(self, size: int = 1000) -> None:
        if size < 1:
            raise ValueError("window size must be >= 1")
        self._samples: deque[float] = deque(maxlen=size)
        self.total = 0  # samples ever added

    def add(self, ms: float) -> None:
        self._samples.append(float(ms))
        self.total += 1

    def __len__(self) -> int:
        return len(self._samples)

    def percentile(self, q: float) -> float | None:
        if not self._samples:
            return None
        return float(np.percentile(np.fromiter(self._samples, float), q))

    def max(self) -> float | None:
        return max(self._samples) if self._samples else None

    def values(self) -> list[float]:
        return list(self._samples)


FIRST_REASONS = 5  # distinct request-error reasons kept, in order of first appearance


@dataclass
class _ServerState:
    up: bool = True
    last_error: str = ""


@dataclass
class _RequestState:
    rejected: bool = False  # the server refused the last request (a 4xx)
    last_rejection: str = ""


@dataclass
class _Period:
    bad: int = 0
    misses: int = 0
    frames: int = 0
    last_bad_reason: str = ""
    started: float = 0.0


@dataclass
class LatencyMonitor:
    budgets: Budgets = field(default_factory=Budgets)
    window: int = 1000
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.windows = {m: RollingWindow(self.window) for m in METRICS}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._server = _ServerState()
        self._requests = _RequestState()
        self.request_error_reasons: list[str] = []
        self._period = _Period(started=self.clock())
        self._last_frame_at: float | None = None
        self._degraded = ""  # why the loop runs degraded (chunk_budget.py); "" while it is not

    def record(self, metric: str, ms: float) -> None:
        with self._lock:
            self.windows[metric].add(ms)

    def count(self, counter: str, n: int = 1) -> None:
        with self._lock:
            self.counters[counter] += n

    def frame_received(self) -> None:
        with self._lock:
            self.counters["frames_in"] += 1
            self._period.frames += 1
            self._last_frame_at = self.clock()

    def frame_dropped_bad(self, reason: str) -> None:
        with self._lock:
            self.counters["frames_dropped_bad"] += 1
            self._period.bad += 1
            self._period.last_bad_reason = reason

    def deadline_missed(self) -> None:
        with self._lock:
            self.counters["deadline_misses"] += 1
            self._period.misses += 1

    def server_down(self, reason: str) -> bool:
        """Marks the server unreachable or failing; True if it was up until now."""
        with self._lock:
            was_up = self._server.up
            self._server = _ServerState(up=False, last_error=reason)
            return was_up

    def server_up(self) -> bool:
        """Marks the server healthy again; True if it was down until now."""
        with self._lock:
            was_down = not self._server.up
            self._server.up = True
            return was_down

    @property
    def server_is_up(self) -> bool:
        with self._lock:
            return self._server.up

    def request_error(self, reason: str) -> None:
        """Counts a request that produced no action (failed, refused, unpublishable)."""
        with self._lock:
            self.counters["request_errors"] += 1
            reasons = self.request_error_reasons
            if reason not in reasons and len(reasons) < FIRST_REASONS:
                reasons.append(reason)

    def request_rejected(self, reason: str) -> bool:
        """Marks the requests refused by the server; True if they were accepted until now."""
        with self._lock:
            was_accepted = not self._requests.rejected
            self._requests = _RequestState(rejected=True, last_rejection=reason)
            return was_accepted

    def request_accepted(self) -> bool:
        """Marks the requests accepted again; True if they were refused until now."""
        with self._lock:
            was_rejected = self._requests.rejected
            self._requests.rejected = False
            return was_rejected

    @property
    def requests_rejected(self) -> bool:
        with self._lock:
            return self._requests.rejected

    @property
    def degraded(self) -> str:
        """Why the loop runs degraded ("" while it does not)."""
        with self._lock:
            return self._degraded

    def loop_degraded(self, reason: str) -> None:
        """The loop adapted to chunks that cannot arrive in time: WARN with `reason`."""
        with self._lock:
            self._degraded = reason

    def set_budgets(self, budgets: Budgets) -> None:
        with self._lock:
            self.budgets = budgets

    def statuses(self, prefix: str = "") -> list[StatusReport]:
        """The camera, server and latency statuses; closes the current period."""
        with self._lock:
            now = self.clock()
            reports = [
                self._camera_status(prefix, now),
                self._server_status(prefix),
                self._requests_status(prefix),
                self._latency_status(prefix),
                self._loop_status(prefix),
            ]
            self._period = _Period(started=now)
            return reports

    def percentiles(self) -> dict[str, dict[str, float | None]]:
        with self._lock:
            return {
                m: {"p50_ms": w.percentile(50), "p99_ms": w.percentile(99), "n": w.total}
                for m, w in self.windows.items()
            }

    def _camera_status(self, prefix: str, now: float) -> StatusReport:
        p, c = self._period, self.counters
        elapsed = max(now - p.started, 1e-9)
        values = (
            ("frames_in", str(c["frames_in"])),
            ("frame_rate_hz", f"{p.frames / elapsed:.2f}"),
            ("frames_dropped_bad", str(c["frames_dropped_bad"])),
            ("frames_superseded", str(c["frames_superseded"])),
            ("frames_stale", str(c["frames_stale"])),
            ("last_bad_frame", p.last_bad_reason),
        )
        name = prefix + "camera input"
        if self._last_frame_at is None or now - self._last_frame_at > self.budgets.stale_after_s:
            return StatusReport(name, Level.STALE, "no camera frames", values)
        if p.bad:
            msg = f"dropped {p.bad} bad frame(s): {p.last_bad_reason}"
            return StatusReport(name, Level.WARN, msg, values)
        return StatusReport(name, Level.OK, "receiving frames", values)

    def _server_status(self, prefix: str) -> StatusReport:
        c, s = self.counters, self._server
        values = (
            ("state", "up" if s.up else "down"),
            ("last_error", s.last_error),
            ("reconnects", str(c["reconnects"])),
            ("request_errors", str(c["request_errors"])),
            ("malformed_sse_lines", str(c["malformed_sse_lines"])),
            ("late_commands", str(c["late_commands"])),
        )
        name = prefix + "inference server"
        if not s.up:
            return StatusReport(name, Level.ERROR, f"server unavailable: {s.last_error}", values)
        return StatusReport(name, Level.OK, "server reachable", values)

    def _requests_status(self, prefix: str) -> StatusReport:
        r = self._requests
        values = (
            ("state", "rejected" if r.rejected else "accepted"),
            ("last_rejection", r.last_rejection),
            ("request_errors", str(self.counters["request_errors"])),
        )
        name = prefix + "requests"
        if r.rejected:
            msg = f"the server refuses the requests: {r.last_rejection}"
            return StatusReport(name, Level.ERROR, msg, values)
        return StatusReport(name, Level.OK, "requests accepted", values)

    def _loop_status(self, prefix: str) -> StatusReport:
        c = self.counters
        values = (("actions_late", str(c["actions_late"])), ("reason", self._degraded))
        if self._degraded:
            return StatusReport(prefix + "control loop", Level.WARN, self._degraded, values)
        return StatusReport(prefix + "control loop", Level.OK, "chunks arrive in time", values)

    def _latency_status(self, prefix: str) -> StatusReport:
        b, c = self.budgets, self.counters
        p99 = {m: self.windows[m].percentile(99) for m in METRICS}
        values = [
            (f"{m}_{q}_ms", _fmt(self.windows[m].percentile(int(q[1:]))))
            for m in METRICS
            for q in ("p50", "p99")
        ]
        values += [
            ("window", str(self.window)),
            ("deadline_ms", _fmt(b.deadline_ms)),
            ("ttft_budget_ms", _fmt(b.ttft_budget_ms)),
            ("itl_p99_budget_ms", _fmt(b.itl_p99_budget_ms)),
            ("deadline_misses", str(c["deadline_misses"])),
            ("deadline_misses_in_period", str(self._period.misses)),
            ("frames_processed", str(c["frames_processed"])),
            ("frames_expired", str(c["frames_expired"])),
            ("actions_published", str(c["actions_published"])),
        ]
        name = prefix + "latency"
        if self._period.misses:
            msg = f"{self._period.misses} deadline miss(es) of {_fmt(b.deadline_ms)} ms"
            return StatusReport(name, Level.ERROR, msg, tuple(values))
        over = [
            f"{label} P99 {_fmt(p99[m])} ms > {_fmt(limit)} ms"
            for m, label, limit in (
                ("ttft", "TTFT", b.ttft_budget_ms),
                ("itl", "ITL", b.itl_p99_budget_ms),
                ("frame_to_action", "frame-to-action", b.deadline_ms),
            )
            if p99[m] is not None and p99[m] > limit
        ]
        if over:
            return StatusReport(name, Level.WARN, "; ".join(over), tuple(values))
        if all(v is None for v in p99.values()):
            return StatusReport(name, Level.OK, "no requests yet", tuple(values))
        return StatusReport(name, Level.OK, "within budgets", tuple(values))


def _fmt(value: float | None) -> str:
    return "nan" if value is None else f"{value:.2f}"
