"""The rclpy subset the bridge uses: init/shutdown, nodes, spinning and executors.

Module functions behave as rclpy's (Jazzy). Shim-only: `init(transport=...)` picks the
transport ('inproc' or 'dds'; default $VLA_SHIM_TRANSPORT, else 'inproc').
"""

from __future__ import annotations

import threading
from typing import Any

from ros_bridge.shim.rclpy import (
    callback_groups,
    client,
    clock,
    duration,
    executors,
    logging,
    node,
    parameter,
    qos,
    serialization,
    service,
    task,
    time,
    utilities,
)
from ros_bridge.shim.rclpy.context import Context, get_default_context
from ros_bridge.shim.rclpy.executors import Executor, SingleThreadedExecutor
from ros_bridge.shim.rclpy.node import Node

__all__ = [
    "callback_groups",
    "client",
    "clock",
    "create_node",
    "duration",
    "executors",
    "get_global_executor",
    "init",
    "logging",
    "node",
    "ok",
    "parameter",
    "qos",
    "serialization",
    "service",
    "shutdown",
    "spin",
    "spin_once",
    "spin_until_future_complete",
    "task",
    "time",
    "try_shutdown",
    "utilities",
]


class InitContextManager:
    """What `init` returns: `with rclpy.init(): ...` shuts down on exit (as Rolling allows)."""

    def __init__(self, context: Context) -> None:
        self.context = context

    def __enter__(self) -> InitContextManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.context.try_shutdown()


def init(
    *,
    args: list[str] | None = None,
    context: Context | None = None,
    domain_id: int | None = None,
    signal_handler_options: Any = None,
    transport: str | None = None,
) -> InitContextManager:
    context = context if context is not None else get_default_context()
    context.init(args, domain_id=domain_id, transport=transport)
    return InitContextManager(context)


def shutdown(*, context: Context | None = None, uninstall_handlers: bool | None = None) -> None:
    (context if context is not None else get_default_context(shutting_down=True)).shutdown()


def try_shutdown(*, context: Context | None = None, uninstall_handlers: bool | None = None) -> None:
    (context if context is not None else get_default_context(shutting_down=True)).try_shutdown()


def ok(*, context: Context | None = None) -> bool:
    return (context if context is not None else get_default_context(shutting_down=True)).ok()


def create_node(node_name: str, **kwargs: Any) -> Node:
    return Node(node_name, **kwargs)


_global_executor: Executor | None = None
_global_lock = threading.Lock()


def get_global_executor() -> Executor:
    """A SingleThreadedExecutor on the current default context."""
    global _global_executor
    with _global_lock:
        context = get_default_context()
        if _global_executor is None or _global_executor.context is not context:
            _global_executor = SingleThreadedExecutor(context=context)
        return _global_executor


def spin(node: Node, executor: Executor | None = None) -> None:
    """Runs `node`'s callbacks until the context (or the executor) shuts down."""
    executor = executor if executor is not None else get_global_executor()
    try:
        executor.add_node(node)
        while executor.context.ok():
            executor.spin_once()
            if getattr(executor, "_is_shutdown", False):
                break
    finally:
        executor.remove_node(node)


def spin_once(
    node: Node, *, executor: Executor | None = None, timeout_sec: float | None = None
) -> None:
    """Runs at most one of `node`'s callbacks, waiting up to `timeout_sec` (None: forever)."""
    executor = executor if executor is not None else get_global_executor()
    try:
        executor.add_node(node)
        executor.spin_once(timeout_sec=timeout_sec)
    finally:
        executor.remove_node(node)


def spin_until_future_complete(
    node: Node, future: Any, executor: Executor | None = None, timeout_sec: float | None = None
) -> None:
    """Runs `node`'s callbacks until `future` is done or `timeout_sec` passes."""
    executor = executor if executor is not None else get_global_executor()
    try:
        executor.add_node(node)
        executor.spin_until_future_complete(future, timeout_sec=timeout_sec)
    finally:
        executor.remove_node(node)
