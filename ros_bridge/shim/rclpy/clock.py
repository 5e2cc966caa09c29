"""rclpy.clock: Clock and ROSClock (ROS time is system time here: the shim has no /clock)."""

from __future__ import annotations

import threading
import time as _time

from ros_bridge.shim.rclpy.clock_type import ClockType
from ros_bridge.shim.rclpy.duration import Duration
from ros_bridge.shim.rclpy.time import Time

__all__ = ["Clock", "ClockType", "ROSClock"]


class Clock:
    """Reads the time of its `clock_type`; STEADY_TIME is monotonic, the others wall time."""

    def __init__(self, *, clock_type: ClockType = ClockType.SYSTEM_TIME) -> None:
        if not isinstance(clock_type, ClockType):
            raise TypeError("Clock type must be a ClockType enum")
        self._clock_type = clock_type

    @property
    def clock_type(self) -> ClockType:
        return self._clock_type

    def now(self) -> Time:
        ns = _time.monotonic_ns() if self._clock_type == ClockType.STEADY_TIME else _time.time_ns()
        return Time(nanoseconds=ns, clock_type=self._clock_type)

    def sleep_for(self, rel_time: Duration) -> bool:
        return self.sleep_until(self.now() + rel_time)

    def sleep_until(self, until: Time) -> bool:
        """Sleeps until `until` on this clock; True once reached (nothing interrupts it here)."""
        if until.clock_type != self._clock_type:
            raise ValueError("until's clock type does not match this clock's type")
        event = threading.Event()
        while (remaining := until.nanoseconds - self.now().nanoseconds) > 0:
            event.wait(remaining / 1e9)
        return True

    def __repr__(self) -> str:
        return f"Clock(clock_type={self._clock_type.name})"


class ROSClock(Clock):
    """A node's clock. Sim time (`/clock`) is not supported by the shim, so it is never active."""

    def __init__(self) -> None:
        super().__init__(clock_type=ClockType.ROS_TIME)

    @property
    def ros_time_is_active(self) -> bool:
        return False
