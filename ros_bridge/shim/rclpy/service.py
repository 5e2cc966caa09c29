"""rclpy.service.Service: requests queue like a subscription's samples; the executor runs
`callback(request, response)` and sends what it returns back to the client that asked."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ros_bridge.shim.cdr import deserialize_message, serialize_message
from ros_bridge.shim.message import ServiceType
from ros_bridge.shim.rclpy.callback_groups import CallbackGroup
from ros_bridge.shim.rclpy.inbox import ServiceInbox
from ros_bridge.shim.rclpy.qos import QoSProfile

if TYPE_CHECKING:
    from ros_bridge.shim.service_wire import RequestHeader

_log = logging.getLogger(__name__)


class Service(ServiceInbox):
    def __init__(
        self,
        srv_type: type[ServiceType],
        srv_name: str,
        callback: Callable[[Any, Any], Any],
        callback_group: CallbackGroup,
        qos_profile: QoSProfile,
        guard: threading.Condition,
    ) -> None:
        super().__init__(srv_type, srv_name, callback_group, qos_profile, guard)
        self.callback = callback

    def deliver(self, header: RequestHeader, sample: bytes, source: Any) -> None:
        """Called by the transport, from any thread."""
        self.put((header, sample, source))

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
        if self._endpoint is not None and not self.destroyed:
            self._endpoint.reply(header, serialize_message(response), source)

    @property
    def service_name(self) -> str:
        return self._srv_name
