"""What a transport offers the shim: writers and readers of serialized CDR samples on named topics.

Topic names are ROS names ('/camera/image_raw'); a transport maps them to its own naming.
Readers hand each received sample to `deliver` from whatever thread the transport uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ros_bridge.shim.message import Message
    from ros_bridge.shim.rclpy.qos import QoSProfile

Deliver = Callable[[bytes], None]


class Writer(Protocol):
    def write(self, payload: bytes) -> None: ...

    def matched_count(self) -> int: ...

    def close(self) -> None: ...


class Reader(Protocol):
    def matched_count(self) -> int: ...

    def close(self) -> None: ...


class Transport(Protocol):
    name: str

    def create_writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> Writer: ...

    def create_reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> Reader: ...

    def close(self) -> None: ...
