"""An asyncio reader-writer lock: many generations read, a weight update writes.

A waiting writer blocks new readers, so an update is not starved by a steady request stream.
Releasing never awaits: a reader whose task is being cancelled (a client that went away) must
still give its share back, or a later writer would wait forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RWLock:
    def __init__(self) -> None:
        self.readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._changed = asyncio.Event()

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[None]:
        while self._writer or self._writers_waiting:
            await self._changed.wait()
        self.readers += 1
        try:
            yield
        finally:
            self.readers -= 1
            self._signal()

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[None]:
        self._writers_waiting += 1
        try:
            while self._writer or self.readers:
                await self._changed.wait()
        finally:
            self._writers_waiting -= 1
        self._writer = True
        try:
            yield
        finally:
            self._writer = False
            self._signal()
