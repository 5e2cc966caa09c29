"""What the bridge asks for when chunks cannot arrive in time (ROS-free).

A chunk's actions are due one action period apart. With a chunk executor action i of a frame is
the target for `stamp + (i + 1)·Δ`; without one they are published as they come, the first due
at the frame's deadline. On compute slower than the developer's (a 2-core CPU, a bigger model)
chunks can come too late to be of use, and the bridge adapts, once per change, with a WARN:

- with an executor, when no action of a chunk came before its own time, the bridge lengthens
  the action period (the robot plays the policy's motion slower) so that the chunk's last
  action, at the pace measured, would have been on time with a quarter to spare; with no action
  at all (the server ended the request: nothing could be on time) the period doubles;
- without one, when a chunk's actions stream in and only its first k came in time (a model
  slower per action than the period), it asks for k actions per frame (at least one): the
  server stops spending its time on actions the robot would never apply.

The change holds until `num_actions` or the action rate is set again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MARGIN = 1.25  # the lengthened period leaves this factor of the measured time
MAX_PERIOD_S = 10.0  # a chunk's actions never spread further apart than this


@dataclass
class ChunkBudget:
    requested: int  # num_actions as configured
    period_s: float  # the action period as configured
    cap: int | None = None  # the adapted count; None: as configured
    adapted_period_s: float | None = None

    @property
    def num_actions(self) -> int:
        return self.requested if self.cap is None else min(self.cap, self.requested)

    @property
    def action_period_s(self) -> float:
        return self.adapted_period_s or self.period_s

    def due_times(self, base_s: float, first_due_s: float, executor: bool) -> list[float]:
        """When each action asked for is due: with an executor at `base_s` (the frame) plus
        (i + 1) periods, else (or with no period known) at the frame's deadline `first_due_s`
        plus i periods."""
        period = self.action_period_s
        start = base_s + period if executor and period > 0 else first_due_s
        return [start + i * period for i in range(self.num_actions)]

    def observe(
        self, arrived_s: Sequence[float], due_s: Sequence[float], base_s: float, executor: bool
    ) -> str | None:
        """One finished frame: when each of its actions arrived (as many as asked, or fewer
        when the server ended it), against `due_s`. Returns what changed, to log, or None."""
        on_time = [a <= d for a, d in zip(arrived_s, due_s, strict=False)]
        if executor:
            return None if any(on_time) else self._lengthen(arrived_s, base_s)
        return self._shorten(on_time)

    def _lengthen(self, arrived_s: Sequence[float], base_s: float) -> str | None:
        old = self.action_period_s
        # at the pace measured, or (nothing came) twice the wait
        new = MARGIN * (arrived_s[-1] - base_s) / len(arrived_s) if arrived_s else 2.0 * old
        new = min(max(new, old), MAX_PERIOD_S)
        if new <= old:
            return None
        self.adapted_period_s = new
        return (
            f"chunks cannot arrive in time: no action of a chunk came before its own time; "
            f"the action period goes from {old * 1e3:.0f} to {new * 1e3:.0f} ms (the robot "
            "follows the policy's motion slower)"
        )

    def _shorten(self, on_time: list[bool]) -> str | None:
        asked = self.num_actions
        leading = next((i for i, ok in enumerate(on_time) if not ok), len(on_time))
        if leading >= asked or leading == 0:
            return None  # all in time, or the first already late: fewer would not help
        self.cap = leading
        return (
            f"chunks cannot arrive in time: {leading} of {asked} actions came before their due "
            f"times; asking for {leading} per frame from now on (num_actions {asked} -> "
            f"{leading})"
        )
