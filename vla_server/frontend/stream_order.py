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
  is a whole step away), after `--max-hold-ms` at the latest, or as soon as no protected
  request is in flight.
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
        self.deferred: dict[int, ReqState] = {}  # by id(): a batch's states share one event
        self.deferred_since: float | None = None
        self.deferrals = 0  # outputs deferred, counted per stream and message
        self.max_defer_s = 0.0  # the longest a deferred output waited
        self._timer: asyncio.TimerHandle | None = None

    def hand_over(self, states: list[ReqState], protected: bool) -> None:
        """Wake the streams of `states`, which just got output from one message."""
        held_back = self._protected_in_flight()
        if protected or not held_back:
            for st in states:
                st.event.set()
            if self.deferred:
                if held_back:
                    # Right after the protected streams have written what they just got.
                    asyncio.get_running_loop().call_soon(self.flush)
                else:
                    self.flush()
            return
        now = time.perf_counter()
        for st in states:
            self.deferred[id(st)] = st
            self.deferrals += 1
        if self.deferred_since is None:
            self.deferred_since = now
            self._timer = asyncio.get_running_loop().call_later(self.max_hold_s, self.flush)

    def flush(self) -> None:
        """Wake every deferred stream."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.deferred_since is not None:
            waited = time.perf_counter() - self.deferred_since
            self.max_defer_s = max(self.max_defer_s, waited)
            self.deferred_since = None
        deferred, self.deferred = self.deferred, {}
        for st in deferred.values():
            st.event.set()

    def state(self) -> dict[str, float | int]:
        return {"deferred_outputs": self.deferrals, "max_output_defer_ms": self.max_defer_s * 1e3}

    def _protected_in_flight(self) -> bool:
        protects = self.protects
        return protects is not None and any(
            protects(st) and not st.finished for st in self.in_flight()
        )
