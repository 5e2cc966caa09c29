"""Fault test: the server is killed mid-stream and restarted on the same port.

The node must report ERROR on /diagnostics, apply `on_late` (zero: a zero command of the
server's action width, stamped with the frame whose action it replaces), keep running, and
recover to OK by itself once the server answers again, with action streams flowing for new
frames.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ros_bridge.bags import read_frames
from ros_bridge.bridge_node import VlaBridgeNode
from ros_bridge.compat import diagnostic_msgs, rclpy, trajectory_msgs
from ros_bridge.replay import camera_msg
from vla_harness.server_subprocess import free_port, start_server

BAG = Path(__file__).resolve().parents[1] / "data/aloha_transfer_cube_10hz"
OK, ERROR = diagnostic_msgs.msg.DiagnosticStatus.OK, diagnostic_msgs.msg.DiagnosticStatus.ERROR
FRAME_SEC = 1_000_000  # frame stamps count up from here, on_late commands' too
NOW_SEC = 1_500_000_000  # any wall-clock stamp of this decade is above this
STATUSES = 5  # camera input, inference server, requests, latency, control loop
# Latency budgets no machine misses: a cold request on a slow, shared box would otherwise hold
# the latency status at WARN (P99 over the window) or ERROR (a deadline miss), and a miss would
# send the same on_late zero command the fault must cause. Only the fault drives the levels.
GENEROUS_BUDGET_MS = 120_000.0


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.02)


class Observer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commands: list[Any] = []
        self.levels: dict[str, bytes] = {}

    def on_command(self, msg: Any) -> None:
        with self.lock:
            self.commands.append(msg)

    def on_diagnostics(self, msg: Any) -> None:
        with self.lock:
            self.levels = {s.name.split(": ")[1]: s.level for s in msg.status}

    def all_levels(self, level: bytes) -> bool:
        with self.lock:
            return len(self.levels) == STATUSES and all(v == level for v in self.levels.values())

    def level(self, name: str) -> bytes | None:
        with self.lock:
            return self.levels.get(name)

    def frame_streams_after(self, index: int) -> set[int]:
        """Frames that got actions: an action is meant for a time after its frame (an on_late
        command, for the moment it is sent: time_from_start 0)."""
        with self.lock:
            return {
                c.header.stamp.sec
                for c in self.commands[index:]
                if c.points and _offset_ns(c) > 0 and FRAME_SEC <= c.header.stamp.sec < NOW_SEC
            }

    def zero_commands(self) -> list[Any]:
        with self.lock:
            return [
                c
                for c in self.commands
                if c.points and _offset_ns(c) == 0 and not any(c.points[0].positions)
            ]


def _offset_ns(command: Any) -> int:
    start = command.points[0].time_from_start
    return start.sec * 1_000_000_000 + start.nanosec


def camera_loop(publisher: Any, stop: threading.Event) -> None:
    frames = list(itertools.islice(read_frames(BAG), 30))
    for n, frame in enumerate(itertools.cycle(frames)):
        if stop.wait(0.1):
            return
        msg = camera_msg(frame)
        msg.header.stamp.sec, msg.header.stamp.nanosec = FRAME_SEC + n, 0
        publisher.publish(msg)


def test_server_killed_mid_stream_and_restarted(inproc_rclpy: None, tmp_path: Path) -> None:
    port = free_port()
    server = start_server(port=port, log_path=tmp_path / "server.log")
    stop = threading.Event()
    node = executor = spinner = camera = None
    try:
        server.wait_healthy()
        params = {
            "server_url": server.url,
            "image_topics": ["/cam"],
            "compressed": True,
            "output": "joint_trajectory",
            "on_late": "zero",
            "unnorm_key": "aloha_left",
            "num_actions": 1,
            "deadline_ms": GENEROUS_BUDGET_MS,
            "ttft_budget_ms": GENEROUS_BUDGET_MS,
            "itl_p99_budget_ms": GENEROUS_BUDGET_MS,
            "diagnostics_period_s": 0.25,
        }
        node = VlaBridgeNode(
            parameter_overrides=[rclpy.parameter.Parameter(k, value=v) for k, v in params.items()]
        )
        probe = rclpy.node.Node("probe")
        seen = Observer()
        probe.create_subscription(
            trajectory_msgs.msg.JointTrajectory, "/commands", seen.on_command, 1000
        )
        probe.create_subscription(
            diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", seen.on_diagnostics, 100
        )
        publisher = probe.create_publisher(
            type(camera_msg(next(read_frames(BAG)))), "/cam", rclpy.qos.qos_profile_sensor_data
        )
        executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
        executor.add_node(node)
        executor.add_node(probe)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        camera = threading.Thread(target=camera_loop, args=(publisher, stop), daemon=True)
        camera.start()

        wait_for(
            "actions and all OK before the fault",
            lambda: seen.frame_streams_after(0) and seen.all_levels(OK),
        )
        wait_for("a request in flight", lambda: node.worker.request_in_flight)
        assert not seen.zero_commands()  # so the one awaited below is the fault's
        server.kill()
        wait_for("server status ERROR", lambda: seen.level("inference server") == ERROR)
        wait_for("on_late zero command", lambda: seen.zero_commands())
        zero = seen.zero_commands()[0]
        assert list(zero.points[0].positions) == [0.0] * 7  # the server's action_dim
        assert FRAME_SEC <= zero.header.stamp.sec < NOW_SEC  # the frame it stands in for
        assert node.monitor.counters["late_commands"] >= 1

        server = start_server(port=port, log_path=tmp_path / "server.log")
        server.wait_healthy()
        mark = len(seen.commands)
        wait_for("action streams again", lambda: seen.frame_streams_after(mark))
        wait_for("all OK again", lambda: seen.all_levels(OK))
        assert node.monitor.counters["reconnects"] >= 1
        assert node.monitor.counters["frames_failed"] >= 1
    finally:
        stop.set()
        if camera is not None:
            camera.join(5)
        if executor is not None:
            executor.shutdown(timeout_sec=10)
            spinner.join(10)
        if node is not None:
            node.destroy_node()
        server.stop()
