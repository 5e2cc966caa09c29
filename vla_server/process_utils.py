"""Small helpers shared by the three processes: logging, sockets, child-process hygiene."""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any, NoReturn, TypeVar

import zmq

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
logger = logging.getLogger(__name__)
T = TypeVar("T")

LOG_FORMAT = "[%(asctime)s %(processName)s] %(levelname)s %(name)s: %(message)s"

# The longest a child's loop sleeps on its sockets, so the longest an idle, healthy child goes
# without a heartbeat; --watchdog-timeout must stay well above it.
IDLE_POLL_MS = 1000


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr, force=True)


def zmq_socket(ctx: zmq.Context, kind: int, endpoint: str, bind: bool) -> zmq.Socket:
    sock = ctx.socket(kind)
    # Unbounded queues, as SGLang: a slow consumer backlogs (visible as ITL), it never drops.
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    if bind:
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock


def become_child_process(name: str) -> None:
    """Name the process (ps/top show it), die with the parent (no orphans), and leave Ctrl-C
    to the parent, which drains first."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_NAME, name.encode()[:15])
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Nothing in a child needs flushing; a plain exit could block in zmq context teardown.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


def freeze_startup_heap() -> None:
    """Move everything alive after start-up (torch, transformers, the model, the tokenizer:
    millions of objects) out of the cyclic GC's reach. Otherwise each full collection walks
    them all: measured 230-260 ms in the main process, landing on whichever requests were in
    flight (TTFT P90 of 8 streams 20 ms -> 240 ms, `python -m vla_server.bench serving`)."""
    gc.collect()
    gc.freeze()


class Heartbeat:
    """A count in shared memory that a child process bumps once per iteration of its loop; the
    main process's watchdog takes a count that stops moving as a hung child.

    No lock: the child is the only writer, and a child stopped while holding a lock would
    block the watchdog that is there to notice it."""

    def __init__(self, ctx: BaseContext) -> None:
        self._count = ctx.RawValue(ctypes.c_uint64, 0)

    def beat(self) -> None:
        self._count.value += 1

    @property
    def count(self) -> int:
        return self._count.value


def parent_is_gone(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


# What a wrong checkpoint folder or setting raises while a node starts (WeightLoadError is a
# ValueError); anything else is a bug, reported with its traceback.
CHECKPOINT_ERRORS = (ValueError, OSError, NotImplementedError)


def run_child_process(
    name: str,
    log_level: str,
    ready_pipe: Connection,
    build: Callable[[], T],
    ready_info: Callable[[T], dict[str, Any]],
    serve: Callable[[T], None],
) -> NoReturn:
    """The life of a node's child process (scheduler, detokenizer): build its object, report
    `ready_info` (or the error) on the pipe the launcher waits on, serve until the parent is
    gone, and exit 1 on any failure so the watchdog brings the node down."""
    become_child_process(name)
    configure_logging(log_level)
    try:
        obj = build()
    except Exception as e:
        if isinstance(e, CHECKPOINT_ERRORS):  # a bad folder or flag: the message says it all
            logger.error("%s failed to start: %s: %s", name, type(e).__name__, e)
        else:
            logger.exception("%s failed to start", name)
        ready_pipe.send({"status": "error", "message": f"{type(e).__name__}: {e}"})
        sys.exit(1)
    freeze_startup_heap()
    ready_pipe.send(ready_info(obj))
    ready_pipe.close()
    try:
        serve(obj)
    except Exception:
        logger.exception("%s crashed", name)
        sys.exit(1)
    os._exit(0)
