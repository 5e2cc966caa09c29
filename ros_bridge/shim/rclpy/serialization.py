"""rclpy.serialization: a message to and from its CDR bytes (encapsulation header included)."""

from __future__ import annotations

from ros_bridge.shim.cdr import deserialize_message, serialize_message

__all__ = ["deserialize_message", "serialize_message"]
