"""`vla-bridge record`: subscribe to camera topics and write what arrives to a rosbag2 bag."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ros_bridge import compat, extras
from ros_bridge.bags import BagRecorder
from ros_bridge.camera_frame import frame_from_msg
from ros_bridge.compat import rclpy, sensor_msgs

# Best effort receives from reliable and best-effort publishers alike; the deep queue absorbs
# a slow disk for a few seconds instead of dropping frames.
RECORD_DEPTH = 100


def record_topics(
    bag: Path,
    topics: Sequence[str],
    *,
    compressed: bool,
    storage: str = "mcap",
    duration_s: float | None = None,
    max_frames: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Records until `duration_s`, `max_frames` or `stop`; returns the frames written.

    rclpy must be initialised (any transport). Frames keep their header stamps; the bag's
    receive time is the wall-clock arrival time, as `ros2 bag record` writes it.
    """
    qos = rclpy.qos.QoSProfile(
        depth=RECORD_DEPTH, reliability=rclpy.qos.ReliabilityPolicy.BEST_EFFORT
    )
    msg_type = sensor_msgs.msg.CompressedImage if compressed else sensor_msgs.msg.Image
    node = rclpy.node.Node("vla_bridge_recorder")
    executor = rclpy.executors.SingleThreadedExecutor()
    executor.add_node(node)
    stop = stop or threading.Event()
    end = None if duration_s is None else time.monotonic() + duration_s
    with BagRecorder(bag, storage) as recorder:

        def write(topic: str, msg: Any) -> None:
            recorder.write(frame_from_msg(topic, msg, time.time_ns()))
            if max_frames is not None and recorder.frames_written >= max_frames:
                stop.set()

        for topic in topics:
            node.create_subscription(msg_type, topic, lambda m, t=topic: write(t, m), qos)
        try:
            while not stop.is_set() and (end is None or time.monotonic() < end):
                executor.spin_once(timeout_sec=0.05)
        finally:
            executor.shutdown()
            node.destroy_node()
        return recorder.frames_written


def command(ns: argparse.Namespace) -> None:
    """`vla-bridge record BAG --image-topics T ... [--duration S] [--frames N]`."""
    if compat.USING_SHIM and ns.transport == "dds":
        extras.require("vla-bridge record --transport dds", (extras.DDS,))
    rclpy.init(args=[], **({"transport": ns.transport} if compat.USING_SHIM else {}))
    try:
        n = record_topics(
            ns.bag,
            ns.image_topics,
            compressed=ns.compressed,
            storage=ns.storage,
            duration_s=ns.duration,
            max_frames=ns.frames,
        )
    except KeyboardInterrupt:
        n = -1
    finally:
        rclpy.try_shutdown()
    print(f"recorded {n if n >= 0 else 'some'} frames to {ns.bag}")
