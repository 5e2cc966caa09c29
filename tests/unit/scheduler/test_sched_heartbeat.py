"""The scheduler process's loop beats its heartbeat on every iteration, and with nothing to run
(idle, or paused with requests resident) it sleeps on its sockets at most IDLE_POLL_MS per
iteration: so an idle or paused scheduler keeps beating, and the watchdog never takes it for a
hung one. The loop runs on a core over the fake model, with a poller that records its timeouts
instead of sleeping."""

from __future__ import annotations

import multiprocessing as mp
import os
from types import SimpleNamespace

import pytest

from tests.support.sched_fakes import Harness
from vla_server.io_struct import PauseGenerationReq
from vla_server.process_utils import IDLE_POLL_MS, Heartbeat
from vla_server.scheduler.process import SchedulerProcess

POLLS = 5


class _Stop(Exception):
    pass


class RecordingPoller:
    """Nothing ever arrives; the POLLS-th poll ends the loop."""

    def __init__(self, heartbeat: Heartbeat) -> None:
        self.heartbeat = heartbeat
        self.timeouts: list[int] = []
        self.beats_at_poll: list[int] = []

    def poll(self, timeout: int) -> list[object]:
        self.timeouts.append(timeout)
        self.beats_at_poll.append(self.heartbeat.count)
        if len(self.timeouts) == POLLS:
            raise _Stop
        return []


def run_loop(h: Harness) -> RecordingPoller:
    heartbeat = Heartbeat(mp.get_context("spawn"))
    poller = RecordingPoller(heartbeat)
    shell = SimpleNamespace(core=h.core, ingest=lambda: None, poller=poller)
    with pytest.raises(_Stop):
        SchedulerProcess.event_loop(shell, os.getppid(), heartbeat)  # type: ignore[arg-type]
    return poller


def test_sched_an_idle_loop_beats_before_every_sleep_of_at_most_idle_poll():
    poller = run_loop(Harness())
    assert poller.beats_at_poll == list(range(1, POLLS + 1))
    assert all(0 < t <= IDLE_POLL_MS for t in poller.timeouts), poller.timeouts


def test_sched_a_paused_loop_with_requests_resident_keeps_beating():
    h = Harness()
    h.submit("held", [30, 41, 52], 100, stream=True)
    h.step(3)
    assert h.control(PauseGenerationReq, mode="in_place").success
    poller = run_loop(h)
    assert poller.beats_at_poll == list(range(1, POLLS + 1))
    assert all(0 < t <= IDLE_POLL_MS for t in poller.timeouts), poller.timeouts
