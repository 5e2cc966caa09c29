"""One thread per participant that takes every reader's samples, instead of Cyclone listeners.

A Cyclone listener runs Python on one of Cyclone's own threads, so it needs the GIL while it holds
Cyclone's locks; a `write` from another Python thread holds the GIL and may wait for those locks
(delivering to a reader of the same process waits for a listener call in progress there): the
two wait for each other for ever. Here Cyclone's threads never run Python: a WaitSet wakes this
thread when a reader holds samples (including samples a reader gets at creation, from
transient-local writers of this process), and it takes them and hands each to its handler.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cyclonedds.core import (
    GuardCondition,
    InstanceState,
    ReadCondition,
    SampleState,
    ViewState,
    WaitSet,
)
from cyclonedds.domain import DomainParticipant
from cyclonedds.util import duration

from ros_bridge.shim.transport.dds_types import delete_entity

_ANY_SAMPLE = SampleState.Any | ViewState.Any | InstanceState.Any
_TAKE_BATCH = 64
_log = logging.getLogger(__name__)


class Receiver:
    def __init__(self, participant: DomainParticipant) -> None:
        self._waitset = WaitSet(participant)
        self._wake = GuardCondition(participant)
        self._waitset.attach(self._wake)
        # reader -> (its read condition, sample handler, what to call its samples in a log line)
        self._readers: dict[Any, tuple[ReadCondition, Callable[[Any], None], str]] = {}
        self._lock = threading.RLock()  # a handler may remove a reader (its own, too)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="dds-receive", daemon=True)
        self._thread.start()

    def add(self, reader: Any, handle: Callable[[Any], None], what: str) -> None:
        condition = ReadCondition(reader, _ANY_SAMPLE)
        with self._lock:
            self._readers[reader] = (condition, handle, what)
        self._waitset.attach(condition)

    def remove(self, reader: Any) -> None:
        """Stops taking from `reader`; once this returns, none of its handlers runs."""
        with self._lock:
            entry = self._readers.pop(reader, None)
        if entry is not None:
            self._waitset.detach(entry[0])
            delete_entity(entry[0])

    def _run(self) -> None:
        while True:
            self._waitset.wait(duration(infinite=True))
            if self._stopping:
                return
            self._wake.set(False)
            with self._lock:
                for reader, (condition, handle, what) in list(self._readers.items()):
                    if reader in self._readers and condition.is_triggered():
                        _take_all(reader, handle, what)

    def close(self) -> None:
        self._stopping = True
        self._wake.set(True)
        self._thread.join()
        for reader in list(self._readers):
            self.remove(reader)
        delete_entity(self._waitset)
        delete_entity(self._wake)


def _take_all(reader: Any, handle: Callable[[Any], None], what: str) -> None:
    try:
        while samples := reader.take(N=_TAKE_BATCH):
            for sample in samples:
                handle(sample)
    except Exception:  # one bad sample or handler must not end the receiving thread
        _log.exception("dropping %s after a receive error", what)
