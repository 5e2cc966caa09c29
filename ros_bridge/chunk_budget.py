"""How many actions a frame asks for when its chunk cannot arrive in time (ROS-free).

A chunk's actions are due one action period apart, the first at the frame's deadline. On
compute slower than the developer's (a 2-core CPU, a bigger model) a chunk whose actions
stream in one by one may take longer per action than the robot's period: its first actions
arrive in time and the rest late. The bridge then asks for only as many actions as arrived in
time (at least one), so the server stops spending its time on actions the robot would never
apply and the next frame is answered sooner. It says so once per change, and the change holds
until `num_actions` is set again. A chunk that comes whole (a denoised one) is on time or late
as a whole from its first action on: asking for fewer would not bring it sooner, so then the
bridge only reports it (the executor still applies the actions that are not yet due).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class ChunkBudget:
    requested: int  # num_actions as configured
    cap: int | None = None  # the adapted count; None: as configured
    _reported_whole: bool = False

    @property
    def num_actions(self) -> int:
        return self.requested if self.cap is None else min(self.cap, self.requested)

    def observe(
        self, arrived_s: Sequence[float], first_due_s: float, period_s: float
    ) -> str | None:
        """One finished frame: when each of its actions arrived (all asked for, or fewer when
        the server ended it). Returns what changed, to log, or None."""
        asked = self.num_actions
        on_time = 0
        for i, arrived in enumerate(arrived_s):
            if arrived > first_due_s + i * period_s:
                break
            on_time += 1
        if on_time >= asked:
            return None
        if on_time:
            self.cap = on_time
            return (
                f"chunks cannot arrive in time: {on_time} of {asked} actions came before their "
                f"due times; asking for {on_time} per frame from now on (num_actions {asked} -> "
                f"{on_time})"
            )
        if self._reported_whole:
            return None
        self._reported_whole = True
        return (
            "chunks cannot arrive in time: a frame's first action came after its due time "
            "(the deadline); the executor applies the actions that are still due"
        )
