"""`vla-bridge replay`: play a recorded camera bag through VlaBridgeNode against a live server.

Three nodes share one process (on the shim: the in-process transport): a player publishing
the bag's frames at the recorded pace (or `rate` times it), the bridge node, and an observer
subscribed to the node's commands and to /diagnostics. The report combines the node's own
monitor with what the observer saw from outside: which frame stamps got action streams, how
many actions each, and the frame-publish-to-first-action latency per frame (for the plot).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ros_bridge import compat
from ros_bridge.action_output import output_type
from ros_bridge.bags import describe_bag, paced, read_frames
from ros_bridge.bridge_node import VlaBridgeNode
from ros_bridge.camera_frame import COMPRESSED_MSGTYPE, CameraFrame
from ros_bridge.compat import builtin_interfaces, diagnostic_msgs, rclpy, sensor_msgs
from ros_bridge.latency_monitor import COUNTERS, Level

REPORT_COUNTERS = tuple(c for c in COUNTERS if c != "frames_in")


@dataclass
class ReplayConfig:
    bag: Path
    server_url: str
    image_topics: list[str] | None = None
    rate: float = 1.0
    instruction: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # more node parameters
    drain_timeout_s: float = 60.0


@dataclass
class _Observer:
    """What a separate subscriber sees: commands by frame stamp, and diagnostic levels."""

    trajectory: bool
    streams: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    other_commands: int = 0
    levels: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    diagnostics: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_command(self, msg: Any) -> None:
        now = time.monotonic()
        with self.lock:
            if not self.trajectory:
                self.other_commands += 1
                return
            stamp = (msg.header.stamp.sec, msg.header.stamp.nanosec)
            self.streams.setdefault(stamp, []).append(now)

    def on_diagnostics(self, msg: Any) -> None:
        with self.lock:
            self.diagnostics += 1
            for status in msg.status:
                self.levels[status.name].add(Level(status.level[0]).name)


def camera_msg(frame: CameraFrame) -> Any:
    """The compat (shim or rclpy) message for a recorded frame."""
    stamp = builtin_interfaces.msg.Time(sec=frame.stamp[0], nanosec=frame.stamp[1])
    if frame.compressed:
        msg = sensor_msgs.msg.CompressedImage(format=frame.encoding, data=frame.data)
    else:
        msg = sensor_msgs.msg.Image(
            height=frame.height,
            width=frame.width,
            encoding=frame.encoding,
            is_bigendian=frame.is_bigendian,
            step=frame.step,
            data=frame.data,
        )
    msg.header.stamp = stamp
    msg.header.frame_id = frame.frame_id
    return msg


def _topics_and_kind(config: ReplayConfig) -> tuple[list[str], bool]:
    summary = describe_bag(config.bag)
    topics = config.image_topics or summary.camera_topics
    kinds = {t.topic: t.msgtype for t in summary.topics}
    missing = [t for t in topics if t not in kinds]
    if not topics or missing:
        raise ValueError(f"no camera topic {missing or ''} in {config.bag}")
    compressed = {kinds[t] == COMPRESSED_MSGTYPE for t in topics}
    if len(compressed) != 1:
        raise ValueError("replay needs all image topics raw or all compressed")
    return topics, compressed.pop()


def run_replay(config: ReplayConfig) -> dict[str, Any]:
    """Replays the bag and returns the report (rclpy must not be initialised yet)."""
    topics, compressed = _topics_and_kind(config)
    params: dict[str, Any] = {"output": "joint_trajectory", **config.params}
    params |= {"server_url": config.server_url, "image_topics": topics, "compressed": compressed}
    if config.instruction is not None:
        params["instruction"] = config.instruction
    rclpy.init(args=[], **({"transport": "inproc"} if compat.USING_SHIM else {}))
    try:
        return _replay(config, topics, compressed, params)
    finally:
        rclpy.try_shutdown()


def _replay(
    config: ReplayConfig, topics: list[str], compressed: bool, params: dict[str, Any]
) -> dict[str, Any]:
    overrides = [rclpy.parameter.Parameter(k, value=v) for k, v in params.items()]
    node = VlaBridgeNode(parameter_overrides=overrides)
    side = rclpy.node.Node("vla_bridge_replay")
    observer = _Observer(trajectory=params["output"] == "joint_trajectory")
    side.create_subscription(
        output_type(params["output"]), node.commands.topic_name, observer.on_command, 1000
    )
    side.create_subscription(
        diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", observer.on_diagnostics, 100
    )
    msg_type = sensor_msgs.msg.CompressedImage if compressed else sensor_msgs.msg.Image
    sensor_qos = rclpy.qos.qos_profile_sensor_data
    players = {t: side.create_publisher(msg_type, t, sensor_qos) for t in topics}
    executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    executor.add_node(side)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        published, lateness = _play(config, topics, players)
        # The last frames may still be in the executor's callback when playing ends.
        _wait(lambda: node.trigger_frames_handled >= len(published), 5.0)
        drained = node.worker.wait_idle(config.drain_timeout_s)
        seen = observer.diagnostics
        node.publish_diagnostics()  # the final state, after the last frame
        _wait(lambda: observer.diagnostics > seen, 5.0)
        return _report(config, node, observer, published, lateness, drained)
    finally:
        executor.shutdown(timeout_sec=10)
        spinner.join(10)
        node.destroy_node()
        side.destroy_node()


def _play(
    config: ReplayConfig, topics: list[str], players: dict[str, Any]
) -> tuple[dict[tuple[int, int], float], float]:
    """Publishes every frame when due; returns trigger-frame publish times by stamp."""
    published: dict[tuple[int, int], float] = {}
    max_lateness = 0.0
    for item in paced(read_frames(config.bag, topics), config.rate):
        players[item.frame.topic].publish(camera_msg(item.frame))
        if item.frame.topic == topics[0]:
            published[item.frame.stamp] = time.monotonic()
        max_lateness = max(max_lateness, item.lateness_s)
    return published, max_lateness


def _wait(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def _report(
    config: ReplayConfig,
    node: VlaBridgeNode,
    observer: _Observer,
    published: dict[tuple[int, int], float],
    lateness_s: float,
    drained: bool,
) -> dict[str, Any]:
    monitor = node.monitor
    counters = dict(monitor.counters)
    with observer.lock:
        streams = {s: list(times) for s, times in observer.streams.items()}
        levels = {name: sorted(lv, key=lambda n: Level[n]) for name, lv in observer.levels.items()}
    frame_streams = {s: t for s, t in streams.items() if s in published}
    series = sorted(
        (published[s] - min(published.values()), (times[0] - published[s]) * 1000.0, len(times))
        for s, times in frame_streams.items()
    )
    worst = max((Level[n] for lv in levels.values() for n in lv), default=Level.OK)
    return {
        "bag": str(config.bag),
        "server_url": config.server_url,
        "rate": config.rate,
        "instruction": node.get_parameter("instruction").value,
        "image_topics": list(node.get_parameter("image_topics").value),
        "frames_published": len(published),
        "frames_in": counters["frames_in"],
        **{name: counters[name] for name in REPORT_COUNTERS},
        "request_error_reasons": list(monitor.request_error_reasons),
        **monitor.percentiles(),
        "diagnostic_levels_seen": levels,
        "worst_level": worst.name,
        "action_streams": len(frame_streams),
        "actions_per_stream": sorted({n for _, _, n in series}),
        "other_commands": observer.other_commands + len(streams) - len(frame_streams),
        "observed_frame_to_action": [
            {"t_s": round(t, 4), "ms": round(ms, 3), "actions": n} for t, ms, n in series
        ],
        "deadline_ms": node.get_parameter("deadline_ms").value,
        "replay_max_lateness_ms": round(lateness_s * 1000.0, 3),
        "drained": drained,
    }


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def command(ns: argparse.Namespace) -> None:
    """`vla-bridge replay BAG --server-url URL --report REPORT.json [--plot PNG]`; exits 1 when
    no frame produced an action (the first reasons are in the report and on stderr)."""
    params = dict(ns.param)
    if ns.unnorm_key is not None:
        params["unnorm_key"] = ns.unnorm_key
    config = ReplayConfig(ns.bag, ns.server_url, ns.image_topics, ns.rate, ns.instruction, params)
    report = run_replay(config)
    write_report(report, ns.report)
    if ns.plot is not None:
        from ros_bridge.replay_plot import plot_report

        plot_report(report, ns.plot)
    summary = {k: report[k] for k in ("frames_in", "frames_processed", "deadline_misses")}
    summary["frame_to_action"] = report["frame_to_action"]
    print(json.dumps(summary))
    if report["action_streams"] == 0:
        reasons = "; ".join(report["request_error_reasons"]) or "no request was answered"
        raise SystemExit(f"vla-bridge replay: no frame produced an action: {reasons}")
