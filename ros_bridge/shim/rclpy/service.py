"""rclpy.service.Service: requests queue like a subscription's samples; the executor runs
`callback(request, response)` and sends what it returns back to the client that asked."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ros_bridge.shim.cdr import deserialize_message, serialize_message
from ros_bridge.shim.message import ServiceType
from ros_bridge.shim.rclpy.callback_groups import CallbackGroup
from ros_bridge.shim.rclpy.qos import QoSProfile

if TYPE_CHECKING:
    from ros_bridge.shim.service_wire import RequestHeader
    from ros_bridge.shim.transport import ServiceServer

_log = logging.getLogger(__name__)


class Service:
    def __init__(
        self,
        srv_type: type[ServiceType],
        srv_name: str,
        callback: Callable[[Any, Any], Any],
        callback_group: CallbackGroup,
        qos_profile: QoSProfile,
        guard: threading.Condition,
    ) -> None:
        self.srv_type = srv_type
        self.callback = callback
        self.callback_group = callback_group
        self.qos_profile = qos_profile
        self._srv_name = srv_name
        self._guard = guard
        self._queue: deque[tuple[RequestHeader, bytes, Any]] = deque()
        self._server: ServiceServer | None = None
        self.destroyed = False

    def attach(self, server: ServiceServer) -> None:
        self._server = server

    def deliver(self, header: RequestHeader, sample: bytes, source: Any) -> None:
        """Called by the transport, from any thread."""
        with self._guard:
            if not self.destroyed:
                self._queue.append((header, sample, source))
                self._guard.notify_all()

    def has_pending(self) -> bool:
        return bool(self._queue)

    def take(self) -> tuple[RequestHeader, bytes, Any] | None:
        """The oldest request; the caller holds the context guard."""
        return self._queue.popleft() if self._queue else None

    def decode(self, item: tuple[RequestHeader, bytes, Any]) -> tuple[RequestHeader, Any, Any]:
        header, sample, source = item
        return header, deserialize_message(sample, self.srv_type.Request), source

    def run(self, decoded: tuple[RequestHeader, Any, Any]) -> None:
        header, request, source = decoded
        response = self.callback(request, self.srv_type.Response())
        if not isinstance(response, self.srv_type.Response):
            _log.error(
                "service %s: the callback returned %r, not a response", self._srv_name, response
            )
            return
        if self._server is not None and not self.destroyed:
            self._server.reply(header, serialize_message(response), source)

    @property
    def gids(self) -> tuple[bytes, ...]:
        return self._server.gids if self._server is not None else ()

    @property
    def srv_name(self) -> str:
        return self._srv_name

    @property
    def service_name(self) -> str:
        return self._srv_name

    def destroy(self) -> None:
        with self._guard:
            self.destroyed = True
            self._queue.clear()
        if self._server is not None:
            self._server.close()

    def __repr__(self) -> str:
        return f"Service(name={self._srv_name!r}, srv_type={self.srv_type.__name__})"
