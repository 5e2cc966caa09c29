"""rclpy.executors: run the callbacks of the timers, subscriptions, services and clients of the
nodes added.

Each `spin_once` runs (or, multi-threaded, dispatches) one callback. Work found ready in one look
is served in order before anything found later, so a busy subscription cannot starve the others.
A sample (or request, or reply) that does not decode is logged and dropped instead of stopping
the executor.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

from ros_bridge.shim.cdr import CdrError
from ros_bridge.shim.rclpy.client import Client
from ros_bridge.shim.rclpy.context import Context, get_default_context
from ros_bridge.shim.rclpy.service import Service
from ros_bridge.shim.rclpy.subscription import Subscription
from ros_bridge.shim.rclpy.task import Future as TaskFuture
from ros_bridge.shim.rclpy.timer import Timer

Waitable = Timer | Subscription | Service | Client


class ExternalShutdownException(Exception):
    """The context was shut down while the executor was waiting for work."""


class ShutdownException(Exception):
    """The executor was shut down."""


class TimeoutException(Exception):
    pass


@dataclass
class _Work:
    entity: Waitable
    node: Any
    payload: Any = None  # what the entity took: a sample, a request, a reply


class Executor:
    """Base class: node bookkeeping, waiting for ready work, running one callback."""

    def __init__(self, *, context: Context | None = None) -> None:
        self._context = context if context is not None else get_default_context()
        self._guard = self._context.guard
        self._nodes: list[Any] = []
        self._batch: list[tuple[Waitable, Any]] = []
        self._is_shutdown = False

    @property
    def context(self) -> Context:
        return self._context

    def add_node(self, node: Any) -> bool:
        with self._guard:
            if node in self._nodes:
                return False
            self._nodes.append(node)
        if node.executor is not None and node.executor is not self:
            node.executor.remove_node(node)
        node._executor = self
        self.wake()
        return True

    def remove_node(self, node: Any) -> None:
        with self._guard:
            if node in self._nodes:
                self._nodes.remove(node)
            self._guard.notify_all()
        if node._executor is self:
            node._executor = None

    def get_nodes(self) -> list[Any]:
        with self._guard:
            return list(self._nodes)

    def wake(self) -> None:
        self._context.wake()

    def spin(self) -> None:
        while self._context.ok() and not self._is_shutdown:
            self.spin_once()

    def spin_once(self, timeout_sec: float | None = None) -> None:
        raise NotImplementedError

    def spin_until_future_complete(
        self, future: TaskFuture, timeout_sec: float | None = None
    ) -> None:
        """Spins until `future` is done, the timeout passes, or shutdown."""
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        while self._context.ok() and not self._is_shutdown and not future.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            self.spin_once(timeout_sec=remaining if remaining is not None else 0.1)

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        self._is_shutdown = True
        self.wake()
        return True

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _can_dispatch(self) -> bool:
        return True

    def _next_work(self, timeout_sec: float | None) -> _Work | None:
        """Blocks until a callback may run, the timeout passes (None) or shutdown."""
        deadline = (
            None if timeout_sec is None or timeout_sec < 0 else time.monotonic() + timeout_sec
        )
        with self._guard:
            while True:
                if not self._context.ok():
                    raise ExternalShutdownException()
                if self._is_shutdown:
                    return None
                if self._can_dispatch() and (work := self._take_runnable()) is not None:
                    return work
                user_wait = None if deadline is None else deadline - time.monotonic()
                if user_wait is not None and user_wait <= 0:
                    return None
                # At capacity only a finishing callback (which notifies) can make work runnable.
                timer_wait = self._next_timer_wait() if self._can_dispatch() else None
                waits = [w for w in (user_wait, timer_wait) if w is not None]
                wait = min(waits) if waits else None
                if wait is None or wait > 0:
                    self._guard.wait(wait)

    def _entities(self) -> list[tuple[Waitable, Any]]:
        return [
            (e, node)
            for node in self._nodes
            for e in (*node.timers, *node.subscriptions, *node.services, *node.clients)
        ]

    def _take_runnable(self) -> _Work | None:
        ready = [(e, n) for e, n in self._entities() if _is_ready(e)]
        self._batch = [item for item in self._batch if item in ready]
        self._batch += [item for item in ready if item not in self._batch]
        for index, (entity, node) in enumerate(self._batch):
            if entity.callback_group.beginning_execution(entity):
                del self._batch[index]
                self._work_started()
                if isinstance(entity, Timer):
                    entity.mark_called()
                    return _Work(entity, node)
                return _Work(entity, node, entity.take())
        return None

    def _next_timer_wait(self) -> float | None:
        waits = [
            until / 1e9
            for entity, _ in self._entities()
            if isinstance(entity, Timer)
            and entity.callback_group.can_execute(entity)
            and (until := entity.time_until_next_call()) is not None
        ]
        return min(waits) if waits else None

    def _execute(self, work: _Work) -> None:
        entity = work.entity
        try:
            if isinstance(entity, Timer):
                if entity.callback is not None:
                    entity.callback()
            else:
                self._deliver(entity, work)
        finally:
            with self._guard:
                entity.callback_group.ending_execution(entity)
                self._work_done()
                self._guard.notify_all()

    def _deliver(self, entity: Subscription | Service | Client, work: _Work) -> None:
        try:
            decoded = entity.decode(work.payload)
        except CdrError as exc:
            name = entity.topic_name if isinstance(entity, Subscription) else entity.srv_name
            work.node.get_logger().error(f"dropped a sample on {name}: {exc}")
            return
        entity.run(decoded)

    def _work_started(self) -> None:
        pass

    def _work_done(self) -> None:
        pass


def _is_ready(entity: Waitable) -> bool:
    return entity.is_ready() if isinstance(entity, Timer) else entity.has_pending()


class SingleThreadedExecutor(Executor):
    """Runs callbacks in the thread that spins; a callback's exception propagates out of spin."""

    def spin_once(self, timeout_sec: float | None = None) -> None:
        work = self._next_work(timeout_sec)
        if work is not None:
            self._execute(work)


class MultiThreadedExecutor(Executor):
    """Runs callbacks on a thread pool, within the limits of their callback groups.

    At most `num_threads` callbacks are in flight; a callback's exception is raised from a
    later `spin_once`.
    """

    def __init__(self, num_threads: int | None = None, *, context: Context | None = None) -> None:
        super().__init__(context=context)
        if num_threads is None:
            num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
            num_threads = num_threads or os.cpu_count() or 2
        if num_threads < 1:
            raise ValueError("num_threads must be at least 1")
        self._num_threads = num_threads
        self._pool = ThreadPoolExecutor(num_threads, thread_name_prefix="shim-executor")
        self._futures: list[Future[None]] = []
        self._in_flight = 0

    def _can_dispatch(self) -> bool:
        return self._in_flight < self._num_threads

    def _work_started(self) -> None:
        self._in_flight += 1

    def _work_done(self) -> None:
        self._in_flight -= 1

    def spin_once(self, timeout_sec: float | None = None) -> None:
        self._raise_finished()
        work = self._next_work(timeout_sec)
        if work is not None:
            self._futures.append(self._pool.submit(self._execute, work))

    def _raise_finished(self) -> None:
        done = [f for f in self._futures if f.done()]
        self._futures = [f for f in self._futures if f not in done]
        for future in done:
            future.result()

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        super().shutdown(timeout_sec)
        _, pending = wait_futures(self._futures, timeout=timeout_sec)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return not pending
