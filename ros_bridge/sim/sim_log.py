"""What the simulated robot saw and did, step by step (ROS-free): the data behind the report.

A command for step n is matched by the time it is for (`target_ns`: a JointTrajectory's
header.stamp + its point's time_from_start), which must be the step's state stamp plus one
control period; the bridge's executor answers each JointState exactly so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

NS_PER_S = 1_000_000_000


class Kind(StrEnum):
    CHUNK = "chunk"  # an action from a chunk (fresh)
    LATE = "late"  # the on_late command (hold or zero)
    STOP = "stop"  # on_late stop: an empty trajectory, the arm keeps its last target
    NONE = "none"  # no command came within the wait


@dataclass(frozen=True)
class StepCommand:
    target_ns: int
    kind: Kind
    source_ns: int | None  # the chunk's frame stamp (CHUNK only)
    values: tuple[float, ...] | None


def parse_command(msg: object) -> StepCommand:
    """A JointTrajectory from the executor: one point (an action or the on_late values at
    time_from_start 0) or none (stop)."""
    header = msg.header  # type: ignore[attr-defined]
    stamp_ns = header.stamp.sec * NS_PER_S + header.stamp.nanosec
    points = list(msg.points)  # type: ignore[attr-defined]
    if not points:
        return StepCommand(stamp_ns, Kind.STOP, None, None)
    offset = points[0].time_from_start
    offset_ns = offset.sec * NS_PER_S + offset.nanosec
    values = tuple(float(x) for x in points[0].positions)
    if offset_ns == 0:
        return StepCommand(stamp_ns, Kind.LATE, None, values)
    return StepCommand(stamp_ns + offset_ns, Kind.CHUNK, stamp_ns, values)


class CommandMailbox:
    """Commands handed from the subscription callback to the stepping thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[int, StepCommand] = {}
        self.unmatched = 0  # arrived for a step already done (too late) or never asked for

    def put(self, command: StepCommand) -> None:
        with self._cond:
            self._pending[command.target_ns] = command
            self._cond.notify_all()

    def take(self, target_ns: int, timeout_s: float) -> StepCommand | None:
        with self._cond:
            self._cond.wait_for(lambda: target_ns in self._pending, timeout_s)
            command = self._pending.pop(target_ns, None)
            stale = [t for t in self._pending if t <= target_ns]
            for t in stale:
                del self._pending[t]
            self.unmatched += len(stale)
            return command


@dataclass(frozen=True)
class StepRecord:
    stamp_ns: int  # the state's stamp: the step's time on the fixed schedule (wall clock)
    began_ns: int  # when the step actually began (wall clock): later after a stall
    kind: Kind
    source_ns: int | None
    target: np.ndarray  # the joint targets applied for this step


@dataclass(frozen=True)
class FrameRecord:
    stamp_ns: int  # capture: the state the frame shows
    published_ns: int  # after rendering and encoding


@dataclass
class SimLog:
    joint_names: list[str]
    steps: list[StepRecord] = field(default_factory=list)
    frames: list[FrameRecord] = field(default_factory=list)
    frames_dropped: int = 0  # the renderer was still busy with the previous frame
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_frame(self, record: FrameRecord) -> None:
        with self.lock:
            self.frames.append(record)

    def count(self, kind: Kind) -> int:
        return sum(1 for s in self.steps if s.kind is kind)
