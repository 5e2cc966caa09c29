"""Seconds the model runner spends in each phase (vision tower, decoder, action head), summed.

On a CPU the clock is the host's. On a GPU the kernels run after their launch returns, so a
host clock would time the launches: the phase is bracketed by CUDA events instead and their
elapsed times are read only when the totals are asked for (the events are long done by then),
so serving never waits on the clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Events kept before they are folded into the totals (reading them then waits on the GPU).
_MAX_PENDING = 4096


class PhaseClock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = {}
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((name, start, end))
            if len(self._pending) > _MAX_PENDING:
                self._fold()
            return
        t0 = time.perf_counter()
        yield
        self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def totals(self) -> dict[str, float]:
        """Seconds per phase so far."""
        self._fold()
        return dict(self.seconds)

    def _fold(self) -> None:
        for name, start, end in self._pending:
            end.synchronize()
            self.add(name, start.elapsed_time(end) / 1000.0)
        self._pending.clear()
