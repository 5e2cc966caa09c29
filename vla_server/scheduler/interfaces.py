"""The parts a SchedulerCore is built from, as interfaces: the model runner, the output sink and
the clock. The process shell plugs in the real ones (BatchRunner, a PUSH socket to the
detokenizer, the system clock); unit tests plug in a fake runner, a list and a settable clock.
See docs/architecture.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch

from vla_server.io_struct import BatchTokenIDOutput
from vla_server.scheduler.schedule_batch import BatchResult, ScheduledBatch

# Receives each step's outputs; the process shell encodes and PUSHes them to the detokenizer.
OutputSink = Callable[[BatchTokenIDOutput], None]


class Runner(Protocol):
    """Forward + sample of a scheduled batch (on the model worker thread in overlap mode)."""

    def run(self, batch: ScheduledBatch) -> BatchResult: ...

    def run_background(self, batch: ScheduledBatch) -> BatchResult:
        """`run` on the background lane's thread (priority isolation)."""
        ...

    def generator_for(self, seed: int | None) -> torch.Generator | None: ...

    def update_weights_from_disk(self, model_path: str) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Seconds since the epoch: deadlines are absolute wall-clock times."""
        ...


class SystemClock:
    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)
