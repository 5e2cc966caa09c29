"""What the scheduling rules read and change: the waiting queue, the running requests, the
batch in flight and a few counters. The SchedulerCore owns one; its helpers get it explicitly."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.req import Req
from vla_server.scheduler.schedule_batch import BatchResult, ScheduledBatch

InFlight = tuple[ScheduledBatch, "Future[BatchResult]"]


@dataclass(eq=False)
class SchedState:
    reserve_ratio: float  # raised after a retraction under KV pressure, then decays
    waiting: list[Req] = field(default_factory=list)
    running: list[Req] = field(default_factory=list)
    inflight: InFlight | None = None  # launched batch whose result is not applied yet
    background: InFlight | None = None  # the background lane's batch (priority isolation)
    paused: bool = False
    step_count: int = 0  # batches launched
    num_retractions: int = 0
    held_steps: int = 0  # steps a request was held out of by priority isolation, summed
    num_held: int = 0  # requests held out of the latest step built
    background_steps: int = 0  # batches launched in the background lane
    # Priority isolation's bound, as it held: the longest a request that isolation held went
    # from one of its steps to the next, and the longest step (forward) of either lane.
    max_unprotected_gap_s: float = 0.0
    max_step_s: float = 0.0

    def retract(self, req: Req, kv: KVCacheManager) -> None:
        """Preempt a running request: its KV goes to the radix cache (evictable), it re-queues
        with its output so far and is recomputed later, mostly from prefix hits."""
        assert req.inflight == 0, "drain before retracting"
        kv.release(req)
        if req.denoise is not None:
            req.denoise.restart()
        self.running.remove(req)
        req.gap_from = None  # waiting for room again: not a gap between its steps
        req.num_retractions += 1
        self.num_retractions += 1
        self.waiting.append(req)
