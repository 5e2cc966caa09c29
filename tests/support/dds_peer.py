"""Child process of the DDS tests: a shim node that receives Images and reports them as JSON.

Run as `python -m tests.support.dds_peer --domain D --topic T --count N --timeout S`. Prints
`READY` once subscribed, then one JSON line: every received frame's fields, a SHA-256 of its data
and its receive time, taken in the subscription callback, as a node would see it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from typing import Any

from ros_bridge.shim import rclpy
from ros_bridge.shim.rclpy.context import Context
from ros_bridge.shim.rclpy.executors import SingleThreadedExecutor
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.sensor_msgs.msg import Image


def describe(msg: Image, recv_ns: int) -> dict[str, Any]:
    return {
        "recv_ns": recv_ns,
        "stamp": [msg.header.stamp.sec, msg.header.stamp.nanosec],
        "frame_id": msg.header.frame_id,
        "height": msg.height,
        "width": msg.width,
        "encoding": msg.encoding,
        "is_bigendian": msg.is_bigendian,
        "step": msg.step,
        "data_len": len(msg.data),
        "data_sha256": hashlib.sha256(msg.data).hexdigest(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--domain", type=int, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    context = Context()
    rclpy.init(context=context, domain_id=args.domain, transport="dds")
    received: list[dict[str, Any]] = []
    try:
        node = Node("dds_peer", context=context)
        node.create_subscription(
            Image,
            args.topic,
            lambda msg: received.append(describe(msg, time.time_ns())),
            QoSProfile(depth=args.count),
        )
        print("READY", flush=True)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        deadline = time.monotonic() + args.timeout
        while len(received) < args.count and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.2)
    finally:
        context.try_shutdown()
    print(json.dumps({"frames": received}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
