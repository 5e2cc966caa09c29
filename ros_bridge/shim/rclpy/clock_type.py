"""rclpy.clock_type.ClockType: the clock a Time was read from."""

from __future__ import annotations

from enum import IntEnum


class ClockType(IntEnum):
    UNINITIALIZED = 0
    ROS_TIME = 1
    SYSTEM_TIME = 2
    STEADY_TIME = 3
