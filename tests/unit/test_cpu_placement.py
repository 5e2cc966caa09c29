"""Where the node's threads may run with the background lane (`cpu_placement.py`): the split of
the allowed cores, and the calls that apply it, on this process's own threads."""

from __future__ import annotations

import os
import threading

import pytest

from vla_server import cpu_placement


def test_the_rest_of_the_node_gets_the_allowed_cores_after_the_main_lanes(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {5, 2, 7, 3})
    assert cpu_placement.split(1) == (3, 5, 7)
    assert cpu_placement.split(2) == (5, 7)
    assert cpu_placement.split(4) is None  # no core left for the rest: no split


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to split")
def test_a_process_keeps_to_its_cores_and_the_worker_is_freed():
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    rest = cpu_placement.split(1)
    assert rest is not None
    seen: dict[str, tuple[int, ...]] = {}
    placed = threading.Event()

    def worker() -> None:
        placed.wait()
        cpu_placement.free_main_lane_worker(allowed)
        seen["worker"] = tuple(sorted(os.sched_getaffinity(threading.get_native_id())))

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        cpu_placement.keep_process_to(rest)
        seen["caller"] = tuple(sorted(os.sched_getaffinity(0)))
        later = threading.Thread(
            target=lambda: seen.update(later=tuple(sorted(os.sched_getaffinity(0))))
        )
        later.start()
        later.join()
        placed.set()
        thread.join()
    finally:
        cpu_placement.keep_process_to(allowed)  # the test runner's threads as they were
    assert seen == {"caller": rest, "later": rest, "worker": allowed}


def test_without_affinities_nothing_is_split(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    assert cpu_placement.split(1) is None
