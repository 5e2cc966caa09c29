"""The node's watchdog: one thread that notices a child process (scheduler, detokenizer) that
died, or that stopped making progress, and reports it once.

Progress is the child's heartbeat (`process_utils.Heartbeat`), bumped on every iteration of its
loop. The loops wake at least every `IDLE_POLL_MS` even with nothing to do (or paused), so only
a child stuck inside one iteration (a forward that never returns, a stopped process) lets its
count stand still for `timeout` seconds. The age is measured on this process's clock, from when
the watchdog first saw the count at its latest value.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess

from vla_server.process_utils import Heartbeat

Failure = tuple[BaseProcess, str]


def describe_death(p: BaseProcess) -> str:
    return f"{p.name} process (pid {p.pid}) died with exit code {p.exitcode}"


def describe_hang(p: BaseProcess, silent_s: float, timeout_s: float) -> str:
    return (
        f"{p.name} process (pid {p.pid}) hung: no heartbeat for {silent_s:.1f} s "
        f"(--watchdog-timeout {timeout_s:g} s)"
    )


class SubprocessWatchdog:
    def __init__(
        self,
        children: Sequence[tuple[BaseProcess, Heartbeat]],
        on_failure: Callable[[BaseProcess, str], None],
        interval: float,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.children = list(children)
        self.on_failure = on_failure
        self.interval = interval
        self.timeout = timeout
        self.clock = clock
        now = clock()
        # Per child: the heartbeat count last seen, and when it was first seen at that value.
        self._seen = [(hb.count, now) for _, hb in self.children]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="subprocess-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)

    def check(self) -> Failure | None:
        """The first child that is dead or whose heartbeat stood still for longer than the
        timeout, with the reason; None while all are alive and beating."""
        now = self.clock()
        for i, (p, heartbeat) in enumerate(self.children):
            if not p.is_alive():
                return p, describe_death(p)
            count, since = self._seen[i]
            latest = heartbeat.count
            if latest != count:
                self._seen[i] = (latest, now)
            elif now - since > self.timeout:
                return p, describe_hang(p, now - since, self.timeout)
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            failure = self.check()
            if failure is not None:
                if not self._stop.is_set():
                    self.on_failure(*failure)
                return
