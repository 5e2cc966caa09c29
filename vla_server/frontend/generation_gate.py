"""Whether new generations may start: the pause flag (requests wait while paused) and the
reader-writer lock that a weight update takes for writing (generations hold it for reading).
Shared by the TokenizerManager, which waits on it, and the ControlClient, which flips it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from vla_server.frontend.aio_rwlock import RWLock


class GenerationGate:
    def __init__(self) -> None:
        self.paused = False
        self.lock = RWLock()
        # Made on the serving loop (asyncio primitives bind to the loop that first uses them).
        self._cond: asyncio.Condition | None = None

    def start(self) -> None:
        self._cond = asyncio.Condition()

    @property
    def in_flight(self) -> int:
        """Generations holding the gate (between dispatch and their final output)."""
        return self.lock.readers

    @asynccontextmanager
    async def generation(self) -> AsyncIterator[None]:
        """Wait while paused, then hold the gate for reading for the whole generation."""
        assert self._cond is not None, "start() first"
        if self.paused:
            async with self._cond:
                await self._cond.wait_for(lambda: not self.paused)
        async with self.lock.reader():
            yield

    async def resume(self) -> None:
        self.paused = False
        if self._cond is not None:
            async with self._cond:
                self._cond.notify_all()
