"""rclpy.time.Time: a non-negative nanosecond count on a given clock type."""

from __future__ import annotations

from typing import Any

from ros_bridge.shim.builtin_interfaces.msg import Time as TimeMsg
from ros_bridge.shim.rclpy.clock_type import ClockType
from ros_bridge.shim.rclpy.duration import S_TO_NS, Duration


class Time:
    """A point in time; arithmetic and comparison only between times of one clock type."""

    __slots__ = ("_clock_type", "_nanoseconds")

    def __init__(
        self,
        *,
        seconds: float = 0,
        nanoseconds: int = 0,
        clock_type: ClockType = ClockType.SYSTEM_TIME,
    ) -> None:
        if not isinstance(clock_type, ClockType):
            raise TypeError("Clock type must be a ClockType enum")
        total = int(seconds * S_TO_NS) + int(nanoseconds)
        if total < 0:
            raise ValueError("Total nanoseconds value cannot be negative")
        if total >= 2**63:
            raise OverflowError(f"Total nanoseconds value is too large to store: {total}")
        self._nanoseconds = total
        self._clock_type = clock_type

    @property
    def nanoseconds(self) -> int:
        return self._nanoseconds

    @property
    def clock_type(self) -> ClockType:
        return self._clock_type

    def seconds_nanoseconds(self) -> tuple[int, int]:
        return divmod(self._nanoseconds, S_TO_NS)

    def to_msg(self) -> TimeMsg:
        sec, nanosec = self.seconds_nanoseconds()
        return TimeMsg(sec=sec, nanosec=nanosec)

    @classmethod
    def from_msg(cls, msg: Any, clock_type: ClockType = ClockType.ROS_TIME) -> Time:
        return cls(seconds=msg.sec, nanoseconds=msg.nanosec, clock_type=clock_type)

    def __repr__(self) -> str:
        return f"Time(nanoseconds={self._nanoseconds}, clock_type={self._clock_type.name})"

    def __hash__(self) -> int:
        return hash((self._nanoseconds, self._clock_type))

    def __eq__(self, other: object) -> bool:
        return self._nanoseconds == self._same_clock(other)._nanoseconds

    def __lt__(self, other: Time) -> bool:
        return self._nanoseconds < self._same_clock(other)._nanoseconds

    def __le__(self, other: Time) -> bool:
        return self._nanoseconds <= self._same_clock(other)._nanoseconds

    def __gt__(self, other: Time) -> bool:
        return self._nanoseconds > self._same_clock(other)._nanoseconds

    def __ge__(self, other: Time) -> bool:
        return self._nanoseconds >= self._same_clock(other)._nanoseconds

    def __add__(self, other: Duration) -> Time:
        if not isinstance(other, Duration):
            return NotImplemented
        return Time(nanoseconds=self._nanoseconds + other.nanoseconds, clock_type=self._clock_type)

    __radd__ = __add__

    def __sub__(self, other: Time | Duration) -> Any:
        if isinstance(other, Duration):
            return Time(
                nanoseconds=self._nanoseconds - other.nanoseconds, clock_type=self._clock_type
            )
        return Duration(nanoseconds=self._nanoseconds - self._same_clock(other)._nanoseconds)

    def _same_clock(self, other: object) -> Time:
        if not isinstance(other, Time):
            raise TypeError(f"Can't compare or subtract Time and {type(other).__name__}")
        if other._clock_type != self._clock_type:
            raise TypeError("Can't compare times with different clock types")
        return other
