"""rclpy.utilities: command-line helpers and the default context."""

from __future__ import annotations

from ros_bridge.shim.rclpy.arguments import remove_ros_args
from ros_bridge.shim.rclpy.context import get_default_context

__all__ = ["get_default_context", "remove_ros_args"]
