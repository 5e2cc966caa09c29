"""The closed loop as a rosbag2 bag (mcap): camera frames, joint states and commands.

Messages are written as they were published or received, each at its wall-clock time; the bag
replays with `vla-bridge replay` (which reads its camera topics).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from ros_bridge.bags import BagRecorder
from ros_bridge.compat import rclpy


class SimRecorder:
    def __init__(self, path: Path) -> None:
        self._bag = BagRecorder(path, "mcap")
        self._lock = threading.Lock()  # the stepping, camera and executor threads all write
        self.messages = 0

    def write(self, topic: str, msgtype: str, msg: Any) -> None:
        raw = bytes(rclpy.serialization.serialize_message(msg))
        with self._lock:  # stamped inside, so the bag's times never go backwards
            self._bag.write_cdr(topic, msgtype, raw, time.time_ns())
            self.messages += 1

    def close(self) -> None:
        with self._lock:
            self._bag.close()
