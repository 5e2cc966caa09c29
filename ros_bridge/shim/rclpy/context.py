"""rclpy.context.Context: init/shutdown state, global ROS arguments and the transport.

Shim detail: `guard` is the one condition variable of a context. Subscription queues are
changed under it and every change notifies it, so executors sleep on it without missing work.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ros_bridge.shim.rclpy.arguments import RosArguments, parse_ros_args

if TYPE_CHECKING:
    from ros_bridge.shim.transport import Transport


class Context:
    """The state `rclpy.init()` creates and `rclpy.shutdown()` ends."""

    def __init__(self) -> None:
        self.guard = threading.Condition()
        self._lock = threading.Lock()
        self._initialized = False
        self._shut_down = False
        self._on_shutdown: list[Callable[[], None]] = []
        self._domain_id = 0
        self._transport: Transport | None = None
        self.global_arguments = RosArguments()

    def init(
        self,
        args: list[str] | None = None,
        *,
        initialize_logging: bool = True,
        domain_id: int | None = None,
        transport: str | None = None,
    ) -> None:
        """`transport` ('inproc' | 'dds') is the shim's own; default $VLA_SHIM_TRANSPORT."""
        with self._lock:
            if self._initialized:
                raise RuntimeError("Context.init() must only be called once")
            # Imported here: the transports themselves import rclpy's qos and exceptions.
            from ros_bridge.shim.transport import create_transport

            self.global_arguments = parse_ros_args(args)
            self._domain_id = domain_id if domain_id is not None else _env_domain_id()
            self._transport = create_transport(transport, self._domain_id)
            self._initialized = True

    def ok(self) -> bool:
        return self._initialized and not self._shut_down

    def shutdown(self) -> None:
        with self._lock:
            if not self._initialized:
                raise RuntimeError("Context must be initialized before it can be shutdown")
            if self._shut_down:
                raise RuntimeError("Context has already been shut down")
            self._shut_down = True
            callbacks = list(self._on_shutdown)
        if self._transport is not None:
            self._transport.close()
        for callback in callbacks:
            callback()
        self.wake()

    def try_shutdown(self) -> None:
        """Shuts down unless not initialized or already shut down."""
        if self.ok():
            self.shutdown()

    def on_shutdown(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._on_shutdown.append(callback)

    def get_domain_id(self) -> int:
        return self._domain_id

    @property
    def transport(self) -> Transport:
        if self._transport is None or not self.ok():
            raise RuntimeError("the context is not initialized or has been shut down")
        return self._transport

    def wake(self) -> None:
        """Wakes every executor waiting on this context so it re-checks its work."""
        with self.guard:
            self.guard.notify_all()


def _env_domain_id() -> int:
    value = os.environ.get("ROS_DOMAIN_ID", "").strip()
    return int(value) if value else 0


_default_context: Context | None = None
_default_lock = threading.Lock()


def get_default_context(*, shutting_down: bool = False) -> Context:
    """The process's default context; a fresh one once the previous was shut down (as rclpy)."""
    global _default_context
    with _default_lock:
        stale = _default_context is not None and _default_context._shut_down
        if _default_context is None or (stale and not shutting_down):
            _default_context = Context()
        return _default_context
