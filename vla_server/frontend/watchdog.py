"""Notices a dead child process within a poll interval and reports it once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from multiprocessing.process import BaseProcess


class SubprocessWatchdog:
    def __init__(
        self,
        procs: list[BaseProcess],
        on_death: Callable[[BaseProcess], None],
        interval: float = 0.2,
    ):
        self.procs = procs
        self.on_death = on_death
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="subprocess-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for p in self.procs:
                if not p.is_alive():
                    if not self._stop.is_set():
                        self.on_death(p)
                    return
