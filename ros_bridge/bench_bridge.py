"""Bridge overhead: frame-to-first-action through VlaBridgeNode vs a direct request.

    vla-bridge bench [--server-url URL] [--frames N] [--bag BAG] [--out DIR]

Writes `bridge.json` (P50/P90/P99 of both arms, their ratios, the samples) and `bridge.png`
(the latency distribution of both arms) under `--out` (default bench_out/bridge).

Both arms run in this process against the same server, one frame at a time (nothing queues or
is superseded), with the server's caches flushed before every request so each one pays for the
vision encoder and the prefill:

* direct: the frame's bytes in hand -> a streaming request (base64 image, no hash: the server
  computes it) on a keep-alive client -> the first action;
* bridge: a CompressedImage published on the shim's in-process transport -> the node validates,
  decodes and hashes it, streams the request -> the first JointTrajectory a subscriber receives.

The arms alternate which goes first per frame. The ratio of their P50/P99 is the bridge's own
overhead. `direct_first_action_ms` doubles as the e2e test's raw model step for one frame. The
default recording is the one in a source checkout's tests/data; elsewhere pass `--bag`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from ros_bridge import compat
from ros_bridge.bags import read_frames
from ros_bridge.bridge_node import VlaBridgeNode
from ros_bridge.camera_frame import CameraFrame
from ros_bridge.compat import rclpy, sensor_msgs, trajectory_msgs
from ros_bridge.replay import camera_msg
from ros_bridge.request_body import RequestSettings
from ros_bridge.stream_client import VlaStreamClient
from vla_harness.stats import plot_distributions, summary_ms, table, write_json

DEFAULT_BAG = Path(__file__).resolve().parents[1] / "tests/data/aloha_transfer_cube_10hz"
DEFAULT_SETTINGS = RequestSettings(unnorm_key="aloha_left", num_actions=2)
ARMS = ("bridge", "direct")


def distinct_frames(bag: Path, n: int) -> list[CameraFrame]:
    """The first `n` frames of the bag with pairwise different payloads."""
    seen: set[bytes] = set()
    out = []
    for frame in read_frames(bag):
        if frame.data not in seen:
            seen.add(frame.data)
            out.append(frame)
        if len(out) == n:
            break
    return out


def flush_cache(server_url: str, attempts: int = 50) -> None:
    """Empties the server's KV/prefix and vision caches (retries while it finishes a request)."""
    for _ in range(attempts):
        reply = httpx.post(server_url + "/flush_cache", json={}, timeout=30)
        if reply.status_code == 200 and reply.json().get("success"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"server would not flush its cache: {reply.text}")


async def _direct_once(
    client: VlaStreamClient, frame: CameraFrame, settings: RequestSettings
) -> float:
    t0 = time.perf_counter()
    body: dict[str, Any] = {
        "text": settings.instruction,
        "stream": True,
        "image_data": [base64.b64encode(frame.data).decode("ascii")],
        "num_actions": settings.num_actions,
        "sampling_params": {"temperature": settings.temperature},
    }
    if settings.unnorm_key:
        body["unnorm_key"] = settings.unnorm_key
    first = None
    async for chunk in client.stream(body):
        if chunk.actions and first is None:
            first = (time.perf_counter() - t0) * 1000.0
    if first is None:
        raise RuntimeError("the server streamed no action")
    return first


def direct_first_action_ms(
    server_url: str,
    frames: Sequence[CameraFrame],
    settings: RequestSettings = DEFAULT_SETTINGS,
    *,
    flush: bool = True,
) -> list[float]:
    """Per frame, ms from a compressed frame in hand to its first streamed action."""

    async def run() -> list[float]:
        client = VlaStreamClient(server_url)
        try:
            out = []
            for frame in frames:
                if flush:
                    await asyncio.to_thread(flush_cache, server_url)
                out.append(await _direct_once(client, frame, settings))
            return out
        finally:
            await client.aclose()

    return asyncio.run(run())


class _BridgeArm:
    """The node plus a probe publishing frames and timing the first command per frame."""

    def __init__(self, server_url: str, settings: RequestSettings) -> None:
        params = {
            "server_url": server_url,
            "image_topics": ["/bench/camera"],
            "compressed": True,
            "output": "joint_trajectory",
            "deadline_ms": 60_000.0,
            "unnorm_key": settings.unnorm_key,
            "num_actions": settings.num_actions,
            "instruction": settings.instruction,
        }
        overrides = [rclpy.parameter.Parameter(k, value=v) for k, v in params.items()]
        self.node = VlaBridgeNode(parameter_overrides=overrides)
        self.probe = rclpy.node.Node("bench_probe")
        self.first: dict[tuple[int, int], float] = {}
        self.probe.create_subscription(
            trajectory_msgs.msg.JointTrajectory, "/commands", self._on_command, 100
        )
        self.camera = self.probe.create_publisher(
            sensor_msgs.msg.CompressedImage, "/bench/camera", rclpy.qos.qos_profile_sensor_data
        )
        self.executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
        self.executor.add_node(self.node)
        self.executor.add_node(self.probe)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_command(self, msg: Any) -> None:
        self.first.setdefault((msg.header.stamp.sec, msg.header.stamp.nanosec), time.perf_counter())

    def once(self, frame: CameraFrame, stamp: tuple[int, int]) -> float:
        msg = camera_msg(frame)
        msg.header.stamp.sec, msg.header.stamp.nanosec = stamp
        t0 = time.perf_counter()
        self.camera.publish(msg)
        deadline = time.monotonic() + 120
        while stamp not in self.first:
            if time.monotonic() > deadline:
                raise RuntimeError("no action from the bridge within 120 s")
            time.sleep(0.0005)
        elapsed = (self.first[stamp] - t0) * 1000.0
        self.node.worker.wait_idle(120)
        return elapsed

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=10)
        self.thread.join(10)
        self.node.destroy_node()
        self.probe.destroy_node()


def bench(
    server_url: str, frames: Sequence[CameraFrame], settings: RequestSettings
) -> dict[str, list[float]]:
    """Milliseconds from frame to first action per frame, for each arm."""
    rclpy.init(args=[], **({"transport": "inproc"} if compat.USING_SHIM else {}))
    arm = _BridgeArm(server_url, settings)
    direct: list[float] = []
    bridged: list[float] = []
    try:
        arm.once(frames[0], (1, 0))  # warm-up: connections, first-call costs
        direct_first_action_ms(server_url, frames[:1], settings)
        for i, frame in enumerate(frames):
            order = ("bridge", "direct") if i % 2 else ("direct", "bridge")
            for which in order:
                if which == "direct":
                    direct += direct_first_action_ms(server_url, [frame], settings)
                else:
                    flush_cache(server_url)
                    bridged.append(arm.once(frame, (100 + i, 0)))
    finally:
        arm.close()
        rclpy.try_shutdown()
    return {"bridge": bridged, "direct": direct}


def report(samples_ms: dict[str, list[float]], out: Path) -> dict[str, Any]:
    """Prints the table; writes bridge.json and bridge.png under `out`."""
    # The shared helpers take seconds, as the other benchmarks measure them.
    seconds = {arm: [ms / 1000.0 for ms in samples_ms[arm]] for arm in ARMS}
    b, d = (summary_ms(seconds[arm]) for arm in ARMS)
    result: dict[str, Any] = {
        "frames": b["n"],
        "bridge": b,
        "direct": d,
        "ratio_p50": b["p50"] / d["p50"],
        "ratio_p99": b["p99"] / d["p99"],
        "overhead_p50_ms": b["p50"] - d["p50"],
        "samples_ms": samples_ms,
    }
    print("\nframe to first action, ms; ratio = bridge / direct (same run, same server)")
    print(table([{"arm": arm, **result[arm]} for arm in ARMS], ["arm", "p50", "p90", "p99", "n"]))
    print(f"ratio P50 {result['ratio_p50']:.3f}, P99 {result['ratio_p99']:.3f}")
    write_json(out / "bridge.json", result)
    plot_distributions(out / "bridge.png", "frame to first action: bridge vs direct", seconds)
    print(f"wrote {out}/bridge.json and .png")
    return result


def load_frames(bag: Path, n: int) -> list[CameraFrame]:
    """Checked before any server starts, so a bad argument costs nothing."""
    if n < 1:
        raise SystemExit(f"--frames must be >= 1, got {n}")
    if not bag.exists():
        where = " (the default: a source checkout's tests/data)" if bag == DEFAULT_BAG else ""
        raise SystemExit(f"no camera recording at {bag}{where}; pass --bag PATH to a recording")
    return distinct_frames(bag, n)


def settings_from(args: argparse.Namespace) -> RequestSettings:
    """The request settings of `vla-bridge bench`'s flags; an omitted one is the default's."""
    unnorm_key, num_actions = args.unnorm_key, args.num_actions
    return RequestSettings(
        unnorm_key=DEFAULT_SETTINGS.unnorm_key if unnorm_key is None else unnorm_key,
        num_actions=DEFAULT_SETTINGS.num_actions if num_actions is None else num_actions,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = settings_from(args)
    frames = load_frames(DEFAULT_BAG if args.bag is None else args.bag, args.frames)
    if args.server_url:
        samples = bench(args.server_url, frames, settings)
    else:
        from vla_harness.server_subprocess import running_server

        with (
            tempfile.TemporaryDirectory() as tmp,
            running_server(log_path=Path(tmp) / "server.log") as server,
        ):
            samples = bench(server.url, frames, settings)
    return report(samples, args.out)


def command(args: argparse.Namespace) -> None:
    """`vla-bridge bench` (ros_bridge.cli)."""
    run(args)
