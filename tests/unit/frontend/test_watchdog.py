"""The child watchdog on fake processes, real heartbeats and a fake clock: a child that keeps
beating is never hung however long it idles; a heartbeat that stands still for longer than the
timeout is a hang naming the process, its pid and the silence; a dead child is a death; the
thread reports the first failure once. Plus the heartbeat across a spawned process and the
`--watchdog-timeout` flag's way into the launch config."""

from __future__ import annotations

import multiprocessing as mp
import threading
from dataclasses import dataclass
from itertools import count

import pytest

from vla_server.config import ServerArgs
from vla_server.frontend.watchdog import SubprocessWatchdog
from vla_server.process_utils import IDLE_POLL_MS, Heartbeat

TIMEOUT_S = 3.0
INTERVAL_S = 0.2
LIVENESS_S = 30.0  # bound on waiting for something that must happen; never a timing assertion
CTX = mp.get_context("spawn")


@dataclass
class FakeProcess:
    name: str
    pid: int
    exitcode: int | None = None

    def is_alive(self) -> bool:
        return self.exitcode is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watched() -> tuple[SubprocessWatchdog, FakeClock, list[FakeProcess], list[Heartbeat]]:
    procs = [FakeProcess("scheduler", 4242), FakeProcess("detokenizer", 4343)]
    beats = [Heartbeat(CTX), Heartbeat(CTX)]
    clock = FakeClock()
    dog = SubprocessWatchdog(
        list(zip(procs, beats, strict=True)),  # type: ignore[arg-type]
        on_failure=lambda p, why: None,
        interval=INTERVAL_S,
        timeout=TIMEOUT_S,
        clock=clock,
    )
    return dog, clock, procs, beats


def test_children_beating_as_idle_loops_do_are_never_hung():
    dog, clock, _, beats = watched()
    # An idle child beats once per IDLE_POLL_MS; watch it for 100 timeouts, a check per interval.
    checks_per_beat = round(IDLE_POLL_MS / 1000 / INTERVAL_S)
    for i in range(round(100 * TIMEOUT_S / INTERVAL_S)):
        clock.now += INTERVAL_S
        if i % checks_per_beat == 0:
            for hb in beats:
                hb.beat()
        assert dog.check() is None, f"hung after {i} checks"


def test_a_heartbeat_standing_still_past_the_timeout_is_a_hang_naming_the_process():
    dog, clock, procs, beats = watched()
    beats[0].beat()
    beats[1].beat()
    assert dog.check() is None  # the watchdog sees the latest counts at 100.0
    clock.now += TIMEOUT_S
    beats[1].beat()  # the detokenizer goes on beating; the scheduler does not
    assert dog.check() is None, "exactly the timeout is not past it"
    clock.now += 0.5
    failure = dog.check()
    assert failure is not None
    proc, reason = failure
    assert proc is procs[0]
    assert reason == (
        "scheduler process (pid 4242) hung: no heartbeat for 3.5 s (--watchdog-timeout 3 s)"
    )


def test_a_beat_before_the_timeout_starts_the_silence_again():
    dog, clock, _, beats = watched()
    for _ in range(10):
        clock.now += 0.9 * TIMEOUT_S
        assert dog.check() is None
        for hb in beats:
            hb.beat()
        assert dog.check() is None


def test_a_dead_child_is_a_death_with_its_exit_code():
    dog, _, procs, _ = watched()
    procs[1].exitcode = -9
    failure = dog.check()
    assert failure is not None
    assert failure[0] is procs[1]
    assert failure[1] == "detokenizer process (pid 4343) died with exit code -9"


def test_the_thread_reports_the_first_failure_once_and_stops():
    ticks = count(0.0, TIMEOUT_S)  # every check sees a whole timeout pass without a beat
    failures: list[tuple[object, str]] = []
    reported = threading.Event()

    def on_failure(p: object, reason: str) -> None:
        failures.append((p, reason))
        reported.set()

    proc = FakeProcess("scheduler", 4242)
    dog = SubprocessWatchdog(
        [(proc, Heartbeat(CTX))],  # type: ignore[list-item]
        on_failure,
        interval=0.01,
        timeout=TIMEOUT_S,
        clock=lambda: next(ticks),
    )
    dog.start()
    assert reported.wait(LIVENESS_S)
    dog._thread.join(LIVENESS_S)
    assert not dog._thread.is_alive(), "the thread goes on after reporting"
    assert len(failures) == 1 and failures[0][0] is proc
    assert "scheduler process (pid 4242) hung" in failures[0][1]
    dog.stop()


def _beat(heartbeat: Heartbeat, n: int) -> None:
    for _ in range(n):
        heartbeat.beat()


def test_a_heartbeat_counts_the_beats_of_a_spawned_child():
    heartbeat = Heartbeat(CTX)
    child = CTX.Process(target=_beat, args=(heartbeat, 5))
    child.start()
    child.join(LIVENESS_S)
    assert child.exitcode == 0
    assert heartbeat.count == 5


def test_watchdog_timeout_flag_reaches_the_launch_config():
    assert ServerArgs(model_path="m").configs().launch.watchdog_timeout == 300.0
    assert ServerArgs(model_path="m", watchdog_timeout=2.0).configs().launch.watchdog_timeout == 2.0


def test_a_watchdog_timeout_an_idle_child_could_reach_is_refused():
    # An idle child beats only once per IDLE_POLL_MS: a timeout near that would kill it.
    with pytest.raises(ValueError, match="--watchdog-timeout must be at least 2 seconds"):
        ServerArgs(model_path="m", watchdog_timeout=1.5).configs()
