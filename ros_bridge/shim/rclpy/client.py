"""rclpy.client.Client: `call_async` sends a request and returns a Future, which the executor
completes when the reply arrives (so something must spin the node: `call` waits for that)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ros_bridge.shim.cdr import deserialize_message, serialize_message
from ros_bridge.shim.rclpy.inbox import ServiceInbox
from ros_bridge.shim.rclpy.task import Future

if TYPE_CHECKING:
    pass

_POLL_S = 0.05


class Client(ServiceInbox):
    def __init__(self, *args: Any) -> None:  # ServiceInbox's: type, name, group, QoS, guard
        super().__init__(*args)
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()

    def call_async(self, request: Any) -> Future:
        if not isinstance(request, self.srv_type.Request):
            raise TypeError(f"Expected {self.srv_type.Request}, got {type(request)}")
        assert self._endpoint is not None
        future = Future()
        with self._lock:  # the reply cannot be handled before its future is registered
            seq = self._endpoint.request(serialize_message(request))
            self._pending[seq] = future
        return future

    def call(self, request: Any, timeout_sec: float | None = None) -> Any:
        """Blocks until the response (None after `timeout_sec`); another thread must spin."""
        done = threading.Event()
        future = self.call_async(request)
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout_sec):
            self.remove_pending_request(future)
            return None
        return future.result()

    def remove_pending_request(self, future: Future) -> None:
        with self._lock:
            for seq, pending in list(self._pending.items()):
                if pending is future:
                    del self._pending[seq]
        future.cancel()

    def service_is_ready(self) -> bool:
        return self._endpoint is not None and self._endpoint.is_ready()

    def wait_for_service(self, timeout_sec: float | None = None) -> bool:
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        while not self.service_is_ready():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def deliver(self, seq: int, sample: bytes) -> None:
        """Called by the transport, from any thread."""
        self.put((seq, sample))

    def decode(self, item: tuple[int, bytes]) -> tuple[int, Any]:
        seq, sample = item
        return seq, deserialize_message(sample, self.srv_type.Response)

    def run(self, decoded: tuple[int, Any]) -> None:
        seq, response = decoded
        with self._lock:
            future = self._pending.pop(seq, None)
        if future is not None:
            future.set_result(response)
