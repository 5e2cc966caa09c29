"""A child that stops making progress (SIGSTOP, here, while a stream waits on it) is found hung
within --watchdog-timeout: /health stops answering 200, the node logs which process hung and
exits non-zero, as it does for a dead child (test_process_model.py). That an idle or paused
child is never taken for a hung one is a unit test on a fake clock
(tests/unit/frontend/test_watchdog.py, tests/unit/scheduler/test_sched_heartbeat.py): no
wall-clock threshold here."""

from __future__ import annotations

import contextlib
import time

import httpx
import psutil
import pytest

from tests.support.server import ServerProcess, run_server

TIMEOUT_S = 3  # short, so the test is quick; an idle child beats every second
ARGS = ("--max-total-tokens", "2048", "--watchdog-timeout", str(TIMEOUT_S))
DOWN_DEADLINE_S = 60.0  # bound on waiting for what must happen; never a timing assertion
STREAM = {
    "input_ids": [85, 289],
    "stream": True,
    "sampling_params": {"max_new_tokens": 480, "temperature": 0, "ignore_eos": True},
}


def _health_until_down(server: ServerProcess) -> httpx.Response | None:
    """Polls /health until it is not 200: the answer then, or None once nothing answers (the
    node already exited)."""
    deadline = time.monotonic() + DOWN_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            r = httpx.get(server.url + "/health", timeout=5.0)
        except httpx.TransportError:
            return None
        if r.status_code != 200:
            return r
        time.sleep(0.1)
    raise AssertionError(f"/health still 200 after {DOWN_DEADLINE_S:.0f} s:\n{server.log_tail()}")


@pytest.mark.parametrize("victim", ["vla-scheduler", "vla-detokenizer"])
def test_a_stopped_child_is_found_hung_and_takes_the_node_down(llama_path, tmp_path, victim):
    with run_server(llama_path, tmp_path, *ARGS) as server:
        child = next(p for p in server.node_children() if p.name() == victim)
        with server.client() as c, c.stream("POST", "/generate", json=STREAM) as r:
            assert r.status_code == 200
            next(line for line in r.iter_lines() if line.startswith("data: "))
            t0 = time.monotonic()
            child.suspend()  # SIGSTOP: alive, but its loop no longer turns
            try:
                health = _health_until_down(server)
                code = server.wait_exit(DOWN_DEADLINE_S)
            finally:
                with contextlib.suppress(psutil.Error):
                    child.resume()
        elapsed = time.monotonic() - t0
    name = victim.removeprefix("vla-")
    what = f"{name} process (pid {child.pid}) hung: no heartbeat for"
    assert code is not None and code != 0, f"node exit code {code}:\n{server.log_tail()}"
    if health is not None:  # caught between the detection and the exit
        assert health.status_code == 503 and what in health.json()["reason"], health.text
    logged = [line for line in server.log().splitlines() if what in line]
    assert logged and " ERROR " in logged[0], server.log_tail()
    print(f"{victim} SIGSTOP -> node exit {code} after {elapsed:.2f}s")
