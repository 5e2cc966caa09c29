"""Which cores the node's threads may run on while priority isolation's background lane is on.

With the lane, a protected robot's steps and the lane's run at once, one core each on a small
machine, and everything else in the node (the scheduler's loop, the detokenizer, the front end,
their socket threads) wakes up many times a step. Wherever the OS puts such a waking thread it
takes a core from one lane; when it is the main lane's, a protected step waits (the main lane's
worker was runnable but off its core for up to 27 ms a step, `bench scheduler priority
--workload text`). So the node splits the cores it may use: the main lane's worker keeps all of
them and a higher OS priority, everything else keeps off the first ones, the main lane's share.
A machine's own placement (taskset, cgroups) is respected: the split is of the allowed set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vla_server.io_struct import ModelInfo

logger = logging.getLogger(__name__)

# The main lane's worker over the node's other threads (nice 0) and the lane (nice 19); raising
# a priority needs CAP_SYS_NICE (root, or a robot's real-time setup), without it nothing changes.
MAIN_LANE_NICE = -10


def split(main_lane_threads: int) -> tuple[int, ...] | None:
    """The cores everything but the main lane's worker keeps to: the allowed ones after the
    first `main_lane_threads`; None when no core would be left, or the OS has no affinities."""
    if not hasattr(os, "sched_getaffinity"):  # not Linux
        return None
    allowed = sorted(os.sched_getaffinity(0))
    rest = tuple(allowed[main_lane_threads:])
    return rest or None


def keep_process_to(cpus: tuple[int, ...]) -> None:
    """Every thread of this process, and those it starts later, on `cpus` only."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that has just ended
            os.sched_setaffinity(int(tid), cpus)


def follow(info: ModelInfo) -> ModelInfo:
    """In the detokenizer: keep to the cores the scheduler left the rest of the node."""
    if info.node_cpus:
        keep_process_to(info.node_cpus)
    return info


def free_main_lane_worker(allowed: tuple[int, ...]) -> None:
    """On the main lane's worker thread: every allowed core (a lone robot's long prefill may use
    them all) and the higher priority when the process may raise it."""
    os.sched_setaffinity(threading.get_native_id(), allowed)
    if not set_thread_nice(MAIN_LANE_NICE):
        logger.info("no CAP_SYS_NICE: the main lane's worker keeps its OS priority")


def set_thread_nice(nice: int) -> bool:
    """The calling thread's own nice value (Linux keeps one per thread); False where the OS
    refuses it (raising needs CAP_SYS_NICE) or has no per-thread priorities."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError:
        return False
    return True
