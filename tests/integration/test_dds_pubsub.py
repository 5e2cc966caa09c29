"""Two processes exchange 640x480 rgb8 Images over the shim's DDS transport on loopback.

The subscriber is a child process (tests/support/dds_peer.py). Every frame must arrive with
all fields intact (checked against the sender's own values and a SHA-256 of the pixels); the
one-way latency (subscriber callback time minus header stamp) is recorded, not asserted: printed
(`pytest -s`), a `record_property` (junit XML) and `dds_latency.json` in the test's tmp folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ros_bridge.shim import rclpy
from ros_bridge.shim.rclpy.context import Context
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.sensor_msgs.msg import Image
from ros_bridge.shim.transport.dds import LOOPBACK_CONFIG

REPO_ROOT = Path(__file__).resolve().parents[2]
FRAMES = 20
RATE_HZ = 10.0


@pytest.fixture
def dds_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Loopback-only Cyclone config for this process and the child, on a random domain."""
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_CONFIG)
    return {**os.environ, "CYCLONEDDS_URI": LOOPBACK_CONFIG, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def peer(dds_env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    domain = random.randint(1, 200)
    topic = f"/vla_test/t{uuid.uuid4().hex[:8]}/image_raw"  # tokens must not start with a digit
    cmd = [
        sys.executable,
        "-m",
        "tests.support.dds_peer",
        "--domain",
        str(domain),
        "--topic",
        topic,
        "--count",
        str(FRAMES),
        "--timeout",
        "90",
    ]
    child = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dds_env, stdout=subprocess.PIPE, text=True)
    try:
        yield child, domain, topic
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


def _read_line(child: subprocess.Popen[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert child.stdout is not None
    threading.Thread(target=lambda: lines.put(child.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        pytest.fail(f"no output from the DDS peer within {timeout} s")


def _frame(index: int, node: Node) -> Image:
    ys, xs = np.mgrid[0:480, 0:640]
    pixels = np.stack([(xs + index) % 256, ys % 256, np.full_like(xs, index)], axis=-1)
    msg = Image(height=480, width=640, encoding="rgb8", is_bigendian=0, step=640 * 3)
    msg.header.frame_id = f"camera_optical_frame_{index}"
    msg.data = pixels.astype(np.uint8).tobytes()
    msg.header.stamp = node.get_clock().now().to_msg()
    return msg


def _expected(msg: Image) -> dict[str, object]:
    return {
        "stamp": [msg.header.stamp.sec, msg.header.stamp.nanosec],
        "frame_id": msg.header.frame_id,
        "height": 480,
        "width": 640,
        "encoding": "rgb8",
        "is_bigendian": 0,
        "step": 1920,
        "data_len": 640 * 480 * 3,
        "data_sha256": hashlib.sha256(bytes(msg.data)).hexdigest(),
    }


def latency_summary(latencies_ms: list[float]) -> dict[str, float | int]:
    deciles = statistics.quantiles(latencies_ms, n=10)
    return {
        "frames": len(latencies_ms),
        "rate_hz": RATE_HZ,
        "min_ms": min(latencies_ms),
        "median_ms": statistics.median(latencies_ms),
        "p90_ms": deciles[8],
        "max_ms": max(latencies_ms),
    }


def test_vga_images_cross_processes_intact(
    peer: tuple[subprocess.Popen[str], int, str],
    record_property: Callable[[str, object], None],
    tmp_path: Path,
) -> None:
    child, domain, topic = peer
    assert _read_line(child, timeout=60) == "READY"
    context = Context()
    rclpy.init(context=context, domain_id=domain, transport="dds")
    try:
        node = Node("dds_camera", context=context)
        publisher = node.create_publisher(Image, topic, QoSProfile(depth=FRAMES))
        deadline = time.monotonic() + 60
        while publisher.get_subscription_count() < 1:
            assert time.monotonic() < deadline, "the DDS peer was never discovered"
            time.sleep(0.05)
        sent = []
        for index in range(FRAMES):
            msg = _frame(index, node)
            publisher.publish(msg)
            sent.append(_expected(msg))
            time.sleep(1.0 / RATE_HZ)
        report = json.loads(_read_line(child, timeout=90))
    finally:
        context.try_shutdown()
    frames = report["frames"]
    received = [{k: v for k, v in f.items() if k != "recv_ns"} for f in frames]
    assert received == sent
    latencies_ms = [
        (f["recv_ns"] - (f["stamp"][0] * 1_000_000_000 + f["stamp"][1])) / 1e6 for f in frames
    ]
    latency = latency_summary(latencies_ms)
    record_property("dds_one_way_latency_ms", json.dumps(latency))
    (tmp_path / "dds_latency.json").write_text(json.dumps(latency, indent=2) + "\n")
    figures = " ".join(f"{k} {latency[f'{k}_ms']:.2f}" for k in ("min", "median", "p90", "max"))
    print(
        f"\nDDS loopback, {len(frames)} x 640x480 rgb8 frames at {RATE_HZ:g} Hz, one-way "
        f"latency (stamp to subscriber callback) ms: {figures} ({tmp_path / 'dds_latency.json'})"
    )
