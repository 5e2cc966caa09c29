"""Protected streams first in the main process (priority isolation; see scheduler/isolation.py).

A protected request's tokens pass through the main process too: the output message is decoded,
its stream's task wakes, the chunk is serialised and written. With several streams in flight,
those steps run in arrival order on one event loop, and on a machine with few cores every
stream's work also takes CPU time from the scheduler's steps. So here, as in the detokenizer:

* the scheduler sends protected requests' outputs in messages of their own, ahead of the others'
  (`BatchStrOutput.protected`), and messages that queued up are handled protected first
  (`io_struct.protected_first`);
* while a protected request is in flight, other streams' outputs are deferred: their chunks
  queue in their states (none is lost; they go out coalesced) and their streams wake just after
  the next protected output has been handed over (its bytes are on their way, and the next one
  is a whole step away), as soon as no protected request is in flight, or `--max-hold-ms` after
  the stream's previous hand-over at the latest. Anchored there, a deferral never makes the wait
  between a stream's tokens longer than the hold, nor adds to a wait the scheduler already made
  longer; so the main process and the scheduler together keep it within `--max-hold-ms` plus one
  step (`max_stream_gap_ms` counts it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from vla_server.frontend.req_state import ReqState


class StreamOrder:
    def __init__(
        self,
        protects: Callable[[ReqState], bool] | None,
        max_hold_s: float,
        in_flight: Callable[[], Iterable[ReqState]],
    ):
        self.protects = protects  # None: no isolation, every stream wakes at once
        self.max_hold_s = max_hold_s
        self.in_flight = in_flight
        # by id() (a batch's states share one event): each deferred stream, since when
        self.deferred: dict[int, tuple[ReqState, float]] = {}
        self.deferrals = 0  # outputs deferred, counted per stream and message
        self.max_defer_s = 0.0  # the longest a deferred output waited
        self.max_stream_gap_s = 0.0  # the longest a less important stream went between outputs
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = float("inf")

    def hand_over(self, states: list[ReqState], protected: bool) -> None:
        """Wake the streams of `states`, which just got output from one message."""
        held_back = self._protected_in_flight()
        now = time.perf_counter()
        if protected or not held_back:
            self._wake(states, now)
            if self.deferred:
                if held_back:
                    # Right after the protected streams have written what they just got.
                    asyncio.get_running_loop().call_soon(self.flush)
                else:
                    self.flush()
            return
        for st in states:
            self.deferred.setdefault(id(st), (st, now))
            self.deferrals += 1
        self._arm(now)

    def flush(self) -> None:
        """Wake every deferred stream."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_due = None, float("inf")
        self._release(list(self.deferred), time.perf_counter())

    def state(self) -> dict[str, float | int]:
        return {
            "deferred_outputs": self.deferrals,
            "max_output_defer_ms": self.max_defer_s * 1e3,
            "max_stream_gap_ms": self.max_stream_gap_s * 1e3,
        }

    def _due(self, st: ReqState, since: float) -> float:
        """When a deferred stream must wake: the hold after its previous hand-over."""
        last = st.handed_over_at
        return (since if last is None else last) + self.max_hold_s

    def _arm(self, now: float) -> None:
        """The timer for the earliest due of the deferred streams."""
        due = min(self._due(st, since) for st, since in self.deferred.values())
        if due >= self._timer_due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = asyncio.get_running_loop().call_later(max(0.0, due - now), self._wake_due)

    def _wake_due(self) -> None:
        self._timer, self._timer_due = None, float("inf")
        now = time.perf_counter()
        due = [k for k, (st, since) in self.deferred.items() if self._due(st, since) <= now]
        self._release(due, now)
        if self.deferred:
            self._arm(now)

    def _release(self, keys: list[int], now: float) -> None:
        woken = []
        for key in keys:
            st, since = self.deferred.pop(key)
            self.max_defer_s = max(self.max_defer_s, now - since)
            woken.append(st)
        self._wake(woken, now)

    def _wake(self, states: list[ReqState], now: float) -> None:
        for st in states:
            last = st.handed_over_at
            if last is not None and self.protects is not None and not self.protects(st):
                self.max_stream_gap_s = max(self.max_stream_gap_s, now - last)
            st.handed_over_at = now
            st.event.set()

    def _protected_in_flight(self) -> bool:
        protects = self.protects
        return protects is not None and any(
            protects(st) and not st.finished for st in self.in_flight()
        )
