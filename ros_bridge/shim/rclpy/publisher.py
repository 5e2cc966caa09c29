"""rclpy.publisher.Publisher."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ros_bridge.shim.cdr import serialize_message
from ros_bridge.shim.message import Message
from ros_bridge.shim.rclpy.qos import QoSProfile

if TYPE_CHECKING:
    from ros_bridge.shim.transport import Writer


class Publisher:
    """Publishes messages of `msg_type` (or their CDR bytes) on one topic."""

    def __init__(
        self, msg_type: type[Message], topic: str, qos_profile: QoSProfile, writer: Writer
    ) -> None:
        self.msg_type = msg_type
        self._topic = topic
        self._qos_profile = qos_profile
        self._writer = writer

    def publish(self, msg: Message | bytes) -> None:
        """Sends `msg`; bytes are taken as an already serialized sample, as rclpy does."""
        if isinstance(msg, bytes):
            self._writer.write(msg)
        elif isinstance(msg, self.msg_type):
            self._writer.write(serialize_message(msg))
        else:
            raise TypeError(f"Expected {self.msg_type}, got {type(msg)}")

    @property
    def gids(self) -> tuple[bytes, ...]:
        return (self._writer.gid,)

    def get_subscription_count(self) -> int:
        return self._writer.matched_count()

    @property
    def topic_name(self) -> str:
        return self._topic

    @property
    def qos_profile(self) -> QoSProfile:
        return self._qos_profile

    def destroy(self) -> None:
        self._writer.close()

    def __repr__(self) -> str:
        return f"Publisher(topic={self._topic!r}, msg_type={self.msg_type.__name__})"
