"""The bridge's client pieces against a live `vla-server serve` (demo model).

Edge hashing is proven through the server itself: the server keys its prefix cache (the image's
pad ids derive from the hash) and its vision-embedding cache by the image hash. A request
carrying the bridge's hash for an image the server has just hashed itself reuses the cached
prefix through the image, without running the vision encoder; the same image with any other
hash shares no image prefix and is encoded again (an embedding-cache miss).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import numpy as np
import psutil
import pytest

from ros_bridge import compat
from ros_bridge.bags import read_frames
from ros_bridge.bench_bridge import flush_cache
from ros_bridge.camera_frame import raw_frame
from ros_bridge.compat import rclpy, sensor_msgs, std_msgs
from ros_bridge.frame_input import PreparedImage, prepare_image
from ros_bridge.replay import camera_msg
from ros_bridge.shim.transport.dds import LOOPBACK_CONFIG
from ros_bridge.stream_client import VlaStreamClient
from tests.support.paths import BAG, REPO
from tests.support.server import run_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with run_server(None, tmp_path_factory.mktemp("server")) as s:
        yield s


def mm_info(server) -> dict[str, Any]:
    return httpx.get(server.url + "/get_server_info", timeout=30).json()["mm"]


async def last_chunk(client: VlaStreamClient, body: dict[str, Any]) -> Any:
    chunks = [c async for c in client.stream(body)]
    return chunks[-1]


def generate(server, image: PreparedImage, mm_hash: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": "pick up the cube",
        "stream": True,
        "image_data": [image.image_data],
        "num_actions": 1,
        "unnorm_key": "aloha_left",
        "sampling_params": {"temperature": 0.0},
    }
    if mm_hash is not None:
        body["mm_hashes"] = [mm_hash]

    async def run() -> dict[str, Any]:
        client = VlaStreamClient(server.url)
        try:
            return (await last_chunk(client, body)).meta
        finally:
            await client.aclose()

    return asyncio.run(run())


def camera_images() -> list[PreparedImage]:
    jpeg = next(iter(read_frames(BAG)))
    bgr = np.random.default_rng(5).integers(0, 256, size=(120, 160, 3), dtype=np.uint8)
    raw = dataclasses.replace(raw_frame("/c", 1, bgr, "bgr8"))
    return [prepare_image(jpeg, None), prepare_image(raw, None)]


def test_compressed_frame_needs_no_edge_hash_to_hit_the_caches(server) -> None:
    """The bridge sends a compressed frame as it came, unhashed: the server's own hash of what it
    decodes makes the repeated frame a prefix-cache hit, the vision encoder not run again."""
    image = camera_images()[0].with_digest(bytes.fromhex(mm_info(server)["preprocess_digest"]))
    assert image.mm_hash is None
    flush_cache(server.url)
    n_image_tokens = mm_info(server)["num_image_tokens"]
    generate(server, image, None)
    before = mm_info(server)["embedding_cache"]
    again = generate(server, image, image.mm_hash)
    assert again["cached_tokens"] >= n_image_tokens
    assert mm_info(server)["embedding_cache"]["misses"] == before["misses"]


def test_bridge_hash_is_the_hash_the_server_computes(server) -> None:
    digest = bytes.fromhex(mm_info(server)["preprocess_digest"])
    image = camera_images()[1].with_digest(digest)  # raw bgr8: converted and hashed at the edge
    flush_cache(server.url)
    n_image_tokens = mm_info(server)["num_image_tokens"]
    generate(server, image, None)  # the server hashes the pixels itself
    before = mm_info(server)["embedding_cache"]
    same = generate(server, image, image.mm_hash)  # the bridge's hash
    after_same = mm_info(server)["embedding_cache"]
    other = f"{int(image.mm_hash, 16) ^ 1:032x}"
    different = generate(server, image, other)
    after_other = mm_info(server)["embedding_cache"]
    # Same hash: the prompt prefix through the image is reused, the vision encoder never runs.
    assert same["cached_tokens"] >= n_image_tokens
    assert after_same["misses"] == before["misses"]
    assert after_other["misses"] == after_same["misses"] + 1
    assert different["cached_tokens"] < n_image_tokens


def test_keep_alive_one_connection_for_many_streams(server) -> None:
    body = {
        "text": "hello",
        "stream": True,
        "sampling_params": {"max_new_tokens": 5, "temperature": 0.0},
    }

    def client_ports() -> set[int]:
        conns = psutil.Process(server.proc.pid).net_connections(kind="tcp")
        return {
            c.raddr.port
            for c in conns
            if c.laddr.port == server.port and c.status == psutil.CONN_ESTABLISHED and c.raddr
        }

    async def run() -> list[set[int]]:
        client = VlaStreamClient(server.url)
        seen = []
        try:
            for _ in range(3):
                chunks = [c async for c in client.stream(body)]
                assert sum(c.n_tokens for c in chunks) == 5
                assert chunks[-1].finish_reason["type"] == "length"
                seen.append(client_ports())
        finally:
            await client.aclose()
        return seen

    seen = asyncio.run(run())
    assert len(seen[0]) == 1 and seen[0] == seen[1] == seen[2]


def test_replay_command_writes_report_and_plot(server, tmp_path) -> None:
    report, plot = tmp_path / "report.json", tmp_path / "plot.png"
    cmd = [
        sys.executable,
        "-m",
        "ros_bridge.cli",
        "replay",
        str(BAG),
        "--server-url",
        server.url,
        "--report",
        str(report),
        "--plot",
        str(plot),
        "--rate",
        "4",
        "--instruction",
        "stack the cube",
        "--unnorm-key",
        "aloha_left",
        "--param",
        "num_actions:=1",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["frames_in"] == 100 and data["instruction"] == "stack the cube"
    assert data["frames_processed"] == data["action_streams"] > 0
    assert data["actions_published"] == data["frames_processed"]  # num_actions:=1
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(done.stdout.strip().splitlines()[-1])["frames_in"] == 100


def test_replay_without_unnorm_key_fails_naming_the_wrong_request(server, tmp_path) -> None:
    """The demo node needs an unnorm_key: every request is a 400, which is a wrong request (not
    an outage), reported as one, and a replay that produced no action fails."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "ros_bridge.cli", "replay", str(BAG), "--server-url", server.url]
    cmd += ["--report", str(report), "--rate", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no frame produced an action: HTTP 400: unnorm_key is required" in done.stderr
    data = json.loads(report.read_text())
    assert data["action_streams"] == 0 and data["request_errors"] == data["frames_failed"] > 0
    (reason,) = data["request_error_reasons"]
    assert reason.startswith("HTTP 400: unnorm_key is required; known keys: ")
    assert data["diagnostic_levels_seen"]["vla_bridge: requests"][-1] == "ERROR"
    assert data["diagnostic_levels_seen"]["vla_bridge: inference server"] == ["OK"]
    assert "server unavailable" not in done.stderr


def test_bridge_benchmark_writes_json_and_plot_under_bench_out(server, tmp_path) -> None:
    cmd = [sys.executable, "-m", "ros_bridge.cli", "bench", "--server-url", server.url]
    cmd += ["--frames", "2", "--num-actions", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "bench_out/bridge"  # the default, relative to where it runs
    result = json.loads((out / "bridge.json").read_text())
    for arm in ("bridge", "direct"):
        assert result[arm]["n"] == 2 and 0 < result[arm]["p50"] <= result[arm]["p99"]
    assert result["ratio_p50"] == pytest.approx(result["bridge"]["p50"] / result["direct"]["p50"])
    assert result["ratio_p99"] == pytest.approx(result["bridge"]["p99"] / result["direct"]["p99"])
    assert (out / "bridge.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not compat.USING_SHIM, reason="the shim's DDS transport is under test")
def test_vla_bridge_run_talks_dds_to_other_processes(server, tmp_path, monkeypatch) -> None:
    """`vla-bridge run` in its own process; this process is the camera and the controller."""
    domain = random.randint(1, 200)
    env = {**os.environ, "CYCLONEDDS_URI": LOOPBACK_CONFIG, "ROS_DOMAIN_ID": str(domain)}
    camera_topic = f"/t{uuid.uuid4().hex[:8]}/image_raw/compressed"
    cmd = [
        sys.executable,
        "-m",
        "ros_bridge.cli",
        "--start_server",
        "false",
        "--port",
        str(server.port),
        "--camera",
        camera_topic,
        "--compressed",
        "true",
        "--unnorm_key",
        "aloha_left",
        "--joint_names",
        *[f"j{i}" for i in range(7)],
    ]
    log = open(tmp_path / "bridge.log", "w")  # noqa: SIM115
    # Started with SIGINT ignored, as a shell without job control starts a background command:
    # the bridge must still stop on SIGINT.
    shell = ["bash", "-c", "trap '' INT; exec \"$@\"", "bridge", *cmd]
    bridge = subprocess.Popen(shell, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_CONFIG)
    try:
        rclpy.init(args=[], transport="dds", domain_id=domain)
        node = rclpy.node.Node("robot")
        commands: list[Any] = []
        node.create_subscription(std_msgs.msg.Float64MultiArray, "/commands", commands.append, 10)
        camera = node.create_publisher(
            sensor_msgs.msg.CompressedImage, camera_topic, rclpy.qos.qos_profile_sensor_data
        )
        frames = itertools.cycle(itertools.islice(read_frames(BAG), 10))
        deadline = time.monotonic() + 180
        while not commands:
            assert time.monotonic() < deadline, (tmp_path / "bridge.log").read_text()[-3000:]
            assert bridge.poll() is None, (tmp_path / "bridge.log").read_text()[-3000:]
            camera.publish(camera_msg(next(frames)))
            rclpy.spin_once(node, timeout_sec=0.2)
        assert len(commands[0].data) == 7
        bridge.send_signal(signal.SIGINT)
        # A hang guard, not a speed bound: on a loaded 2-core CI box the shutdown of the
        # worker, the node and DDS has taken over 30 s.
        try:
            code = bridge.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail("no exit 120 s after SIGINT:\n" + (tmp_path / "bridge.log").read_text())
        assert code == 0, (tmp_path / "bridge.log").read_text()[-3000:]
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait(10)
        log.close()
        rclpy.try_shutdown()
