"""rclpy.subscription.Subscription: a QoS-depth-bounded queue of received samples.

Samples stay serialized until the executor takes one, as in rmw: when a KEEP_LAST queue
overflows, the oldest sample is dropped without ever being decoded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ros_bridge.shim.cdr import deserialize_message
from ros_bridge.shim.message import Message
from ros_bridge.shim.rclpy.callback_groups import CallbackGroup
from ros_bridge.shim.rclpy.inbox import Inbox
from ros_bridge.shim.rclpy.qos import HistoryPolicy, QoSProfile

if TYPE_CHECKING:
    from ros_bridge.shim.transport import Reader


class Subscription(Inbox):
    """Receives `msg_type` on one topic; the executor runs `callback(msg)` per sample."""

    def __init__(
        self,
        msg_type: type[Message],
        topic: str,
        callback: Callable[[Any], None],
        callback_group: CallbackGroup,
        qos_profile: QoSProfile,
        guard: threading.Condition,
        raw: bool = False,
    ) -> None:
        keep_all = qos_profile.history == HistoryPolicy.KEEP_ALL
        super().__init__(guard, maxlen=None if keep_all else max(qos_profile.depth, 1))
        self.msg_type = msg_type
        self.callback = callback
        self.callback_group = callback_group
        self.raw = raw
        self._topic = topic
        self._qos_profile = qos_profile
        self._reader: Reader | None = None

    def attach(self, reader: Reader) -> None:
        self._reader = reader

    def deliver(self, payload: bytes) -> None:
        """Called by the transport, from any thread."""
        self.put(payload)

    def decode(self, payload: bytes) -> Any:
        return payload if self.raw else deserialize_message(payload, self.msg_type)

    def run(self, msg: Any) -> None:
        self.callback(msg)

    @property
    def gids(self) -> tuple[bytes, ...]:
        return (self._reader.gid,) if self._reader is not None else ()

    def get_publisher_count(self) -> int:
        return self._reader.matched_count() if self._reader else 0

    @property
    def topic_name(self) -> str:
        return self._topic

    @property
    def qos_profile(self) -> QoSProfile:
        return self._qos_profile

    def destroy(self) -> None:
        self.close_inbox()
        if self._reader is not None:
            self._reader.close()

    def __repr__(self) -> str:
        return f"Subscription(topic={self._topic!r}, msg_type={self.msg_type.__name__})"
