"""Releasing recorded frames at the pace they were recorded (or faster/slower)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ros_bridge.camera_frame import NS_PER_S, CameraFrame


@dataclass(frozen=True, slots=True)
class PacedFrame:
    frame: CameraFrame
    due_s: float  # on `clock`: first frame's release time + recorded offset / rate
    released_s: float  # on `clock`: when the generator handed the frame out
    lateness_s: float  # released_s - due_s, never negative


def paced(
    frames: Iterable[CameraFrame],
    rate: float = 1.0,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[PacedFrame]:
    """Yields each frame when it is due: its receive-time offset from the first frame / `rate`.

    `rate=2.0` plays twice as fast, `math.inf` as fast as possible. A consumer that holds a
    frame too long makes the following ones late; they are released at once, never skipped,
    and their lateness says by how much (the replay's own backlog, not the system's).
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    first_recv_ns: int | None = None
    start_s = 0.0
    for frame in frames:
        if first_recv_ns is None:
            first_recv_ns, start_s = frame.recv_ns, clock()
        offset_s = (frame.recv_ns - first_recv_ns) / NS_PER_S
        due_s = start_s if math.isinf(rate) else start_s + offset_s / rate
        wait_s = due_s - clock()
        if wait_s > 0:
            sleep(wait_s)
        released_s = clock()
        yield PacedFrame(frame, due_s, released_s, max(0.0, released_s - due_s))
