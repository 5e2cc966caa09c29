"""`vla-bridge record`: frames published on the shim end up in a bag rosbags can read."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ros_bridge.bags import describe_bag, read_frames
from ros_bridge.compat import builtin_interfaces, rclpy, sensor_msgs
from ros_bridge.record import record_topics


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_published_frames_are_recorded(inproc_rclpy: None, tmp_path: Path, storage: str) -> None:
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(4, 6, 3), dtype=np.uint8) for _ in range(5)]
    bag = tmp_path / "bag"
    result: list[int] = []
    recorder = threading.Thread(
        target=lambda: result.append(
            record_topics(
                bag,
                ["/cam/a", "/cam/b"],
                compressed=False,
                storage=storage,
                max_frames=10,
                duration_s=60,
            )
        )
    )
    recorder.start()
    node = rclpy.node.Node("camera")
    pubs = {t: node.create_publisher(sensor_msgs.msg.Image, t, 10) for t in ("/cam/a", "/cam/b")}
    while not all(p.get_subscription_count() for p in pubs.values()):
        time.sleep(0.01)
    for i, pixels in enumerate(images):
        for topic, pub in pubs.items():
            msg = sensor_msgs.msg.Image(
                height=4, width=6, encoding="rgb8", step=18, data=pixels.tobytes()
            )
            msg.header.stamp = builtin_interfaces.msg.Time(sec=100 + i, nanosec=7)
            msg.header.frame_id = topic
            pub.publish(msg)
            time.sleep(0.005)
    recorder.join(30)
    node.destroy_node()
    assert result == [10]
    summary = describe_bag(bag)
    assert summary.storage == storage and sorted(summary.camera_topics) == ["/cam/a", "/cam/b"]
    frames = list(read_frames(bag))  # rosbags decodes the CDR the recorder wrote
    for topic in ("/cam/a", "/cam/b"):
        got = [f for f in frames if f.topic == topic]
        assert [f.stamp for f in got] == [(100 + i, 7) for i in range(5)]
        assert [f.data for f in got] == [p.tobytes() for p in images]
        assert {(f.encoding, f.height, f.width, f.step, f.frame_id) for f in got} == {
            ("rgb8", 4, 6, 18, topic)
        }
