"""rclpy.duration.Duration: a signed span of nanoseconds."""

from __future__ import annotations

from typing import Any

from ros_bridge.shim.builtin_interfaces.msg import Duration as DurationMsg

S_TO_NS = 1_000_000_000


class Duration:
    """A span of time, possibly negative, held as integer nanoseconds."""

    __slots__ = ("_nanoseconds",)

    def __init__(self, *, seconds: float = 0, nanoseconds: int = 0) -> None:
        total = int(seconds * S_TO_NS) + int(nanoseconds)
        if not -(2**63) <= total < 2**63:
            raise OverflowError(f"Total nanoseconds value is too large to store: {total}")
        self._nanoseconds = total

    @property
    def nanoseconds(self) -> int:
        return self._nanoseconds

    def to_msg(self) -> DurationMsg:
        sec, nanosec = divmod(self._nanoseconds, S_TO_NS)
        return DurationMsg(sec=sec, nanosec=nanosec)

    @classmethod
    def from_msg(cls, msg: Any) -> Duration:
        return cls(seconds=msg.sec, nanoseconds=msg.nanosec)

    def __repr__(self) -> str:
        return f"Duration(nanoseconds={self._nanoseconds})"

    def __hash__(self) -> int:
        return hash(self._nanoseconds)

    def __eq__(self, other: object) -> bool:
        return self._nanoseconds == _as_duration(other)._nanoseconds

    def __lt__(self, other: Duration) -> bool:
        return self._nanoseconds < _as_duration(other)._nanoseconds

    def __le__(self, other: Duration) -> bool:
        return self._nanoseconds <= _as_duration(other)._nanoseconds

    def __gt__(self, other: Duration) -> bool:
        return self._nanoseconds > _as_duration(other)._nanoseconds

    def __ge__(self, other: Duration) -> bool:
        return self._nanoseconds >= _as_duration(other)._nanoseconds

    def __add__(self, other: Duration) -> Duration:
        return Duration(nanoseconds=self._nanoseconds + _as_duration(other)._nanoseconds)

    def __sub__(self, other: Duration) -> Duration:
        return Duration(nanoseconds=self._nanoseconds - _as_duration(other)._nanoseconds)


def _as_duration(other: Any) -> Duration:
    if not isinstance(other, Duration):
        raise TypeError(f"Can't compare or combine Duration with {type(other).__name__}")
    return other
