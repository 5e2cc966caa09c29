"""An asyncio reader-writer lock: many generations read, a weight update writes.

A waiting writer blocks new readers, so an update is not starved by a steady request stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RWLock:
    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self.readers = 0
        self._writer = False
        self._writers_waiting = 0

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writer and not self._writers_waiting)
            self.readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self.readers -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[None]:
        async with self._cond:
            self._writers_waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._writer and self.readers == 0)
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            async with self._cond:
                self._writer = False
                self._cond.notify_all()
