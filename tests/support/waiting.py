"""Tests wait for a state that stays true: poll until it holds, fail naming what never came; and
spin rclpy nodes on a thread of their own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T], what: str, timeout_s: float = 60.0, interval_s: float = 0.02
) -> T:
    """The first truthy value `probe` returns; TimeoutError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
    return found


class Spinning:
    """`executor` (rclpy's or the shim's) spinning `nodes` on a thread until `stop()`, which also
    destroys the nodes."""

    def __init__(self, executor: Any, *nodes: Any) -> None:
        self.executor = executor
        self.nodes = nodes
        for node in nodes:
            executor.add_node(node)
        self.thread = threading.Thread(target=executor.spin, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.executor.shutdown(timeout_sec=10)
        self.thread.join(10)
        for node in self.nodes:
            node.destroy_node()
