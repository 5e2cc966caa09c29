"""rclpy.timer.Timer: a periodic callback, scheduled on the monotonic clock.

After a late call the next deadline skips the periods already missed (rcl's behaviour), so a
stalled executor does not release a burst of catch-up calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ros_bridge.shim.rclpy.callback_groups import CallbackGroup
from ros_bridge.shim.rclpy.clock import Clock


class Timer:
    def __init__(
        self,
        callback: Callable[[], Any] | None,
        callback_group: CallbackGroup,
        timer_period_ns: int,
        clock: Clock,
        *,
        autostart: bool = True,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        if timer_period_ns < 0:
            raise ValueError("timer period must not be negative")
        self.callback = callback
        self.callback_group = callback_group
        self.clock = clock
        self._period_ns = timer_period_ns
        self._on_change = on_change  # wakes executors so they see a new deadline
        now = time.monotonic_ns()
        self._last_call_ns = now
        self._next_call_ns = now + timer_period_ns
        self._canceled = not autostart
        self.destroyed = False

    @property
    def timer_period_ns(self) -> int:
        return self._period_ns

    @timer_period_ns.setter
    def timer_period_ns(self, value: int) -> None:
        self._period_ns = value
        self.reset()

    def is_ready(self) -> bool:
        return (
            not self._canceled and not self.destroyed and time.monotonic_ns() >= self._next_call_ns
        )

    def is_canceled(self) -> bool:
        return self._canceled

    def cancel(self) -> None:
        self._canceled = True

    def reset(self) -> None:
        """Restarts the period from now (and un-cancels)."""
        self._next_call_ns = time.monotonic_ns() + self._period_ns
        self._canceled = False
        self._on_change()

    def time_since_last_call(self) -> int:
        return time.monotonic_ns() - self._last_call_ns

    def time_until_next_call(self) -> int | None:
        if self._canceled or self.destroyed:
            return None
        return self._next_call_ns - time.monotonic_ns()

    def mark_called(self) -> None:
        """Advances the schedule for one call; the executor calls it when it takes the timer."""
        now = time.monotonic_ns()
        self._last_call_ns = now
        if self._period_ns == 0:
            self._next_call_ns = now
            return
        missed = max(0, now - self._next_call_ns) // self._period_ns
        self._next_call_ns += (missed + 1) * self._period_ns

    def destroy(self) -> None:
        self.destroyed = True
        self._on_change()
