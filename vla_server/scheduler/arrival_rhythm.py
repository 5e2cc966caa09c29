"""When the next protected request is expected: a robot's control loop sends its frames at a
steady period, so the gaps between the latest arrivals predict the next one.

The prediction is the last arrival plus the median of the latest gaps (the median, so one
dropped or doubled frame does not move it); with fewer than `MIN_GAPS` gaps there is none.
"""

from __future__ import annotations

from collections import deque
from itertools import pairwise

HISTORY = 8  # gaps kept
MIN_GAPS = 3  # gaps needed before anything is predicted


class ArrivalRhythm:
    def __init__(self) -> None:
        self._arrivals: deque[float] = deque(maxlen=HISTORY + 1)

    def observe(self, arrival: float) -> None:
        """Record an arrival (monotonic seconds); one seen before is ignored."""
        if not self._arrivals or arrival > self._arrivals[-1]:
            self._arrivals.append(arrival)

    def last(self) -> float | None:
        return self._arrivals[-1] if self._arrivals else None

    def period(self) -> float | None:
        """The median of the latest gaps between arrivals, in seconds."""
        if len(self._arrivals) <= MIN_GAPS:
            return None
        gaps = sorted(b - a for a, b in pairwise(self._arrivals))
        return gaps[len(gaps) // 2]

    def next_expected(self) -> float | None:
        period = self.period()
        return None if period is None else self._arrivals[-1] + period
