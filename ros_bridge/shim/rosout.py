"""/rosout: every log line of a node, at or above its logger's level, as rcl_interfaces/msg/Log.

rcl publishes each node's log lines on `/rosout` with `qos_profile_rosout_default` (reliable,
transient local, depth 1000, 10 s lifespan), so `ros2 topic echo /rosout` and rqt_console see
them, including lines logged shortly before they started. Here a `logging.Handler` on the node's
logger does it: the shim's loggers are Python loggers, and a child logger's lines reach its
parent's handlers, as rcl publishes sub-loggers' lines too.
"""

from __future__ import annotations

import contextlib
import logging
import time

from ros_bridge.shim.builtin_interfaces.msg import Time
from ros_bridge.shim.rcl_interfaces.msg import Log
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.logging import RcutilsLogger, logger_name
from ros_bridge.shim.rclpy.publisher import Publisher

ROSOUT_TOPIC = "/rosout"
_NS_PER_S = 1_000_000_000
_MAX_LEVEL = 50  # rcutils FATAL; Python's levels below it are rcutils' own numbers


class RosoutHandler(logging.Handler):
    """Publishes the records of one node's logger on /rosout."""

    def __init__(self, publisher: Publisher) -> None:
        super().__init__()
        self._publisher = publisher

    def emit(self, record: logging.LogRecord) -> None:
        now = time.time_ns()
        msg = Log(
            stamp=Time(sec=now // _NS_PER_S, nanosec=now % _NS_PER_S),
            level=min(record.levelno, _MAX_LEVEL),
            name=logger_name(record),
            msg=record.getMessage(),
            file=record.pathname,
            function=record.funcName,
            line=max(record.lineno, 0),
        )
        # a line logged while the node or its context goes away is not an error of its own
        with contextlib.suppress(RCLError):
            self._publisher.publish(msg)


def attach_rosout(logger: RcutilsLogger, publisher: Publisher) -> RosoutHandler:
    handler = RosoutHandler(publisher)
    logger.py_logger.addHandler(handler)
    return handler


def detach_rosout(logger: RcutilsLogger, handler: RosoutHandler) -> None:
    logger.py_logger.removeHandler(handler)
