"""The bridge as a citizen of the ROS 2 graph, seen by a ROS 2 node written without the shim.

`vla-bridge run` runs in its own process on the shim's DDS transport (no server is up, so it
reports the server unavailable, which does not matter here); tests/support/ros2_peer.py plays
a ROS 2 node (plain cyclonedds, rmw_cyclonedds' wire conventions, types written from the
.msg/.srv files and checked against rosbags in tests/unit/bridge/test_ros2_peer_types.py).
Everything runs on loopback with multicast off, in a random domain.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ros_bridge import compat
from ros_bridge.shim import rclpy
from ros_bridge.shim.rclpy.context import Context
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.transport.dds import LOOPBACK_CONFIG
from tests.support.paths import REPO
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not compat.USING_SHIM, reason="the shim's DDS transport is under test"
)
WAIT_S = 90.0  # discovery and CLI processes on a loaded 2-core machine
BRIDGE = "/vla_bridge"
DOUBLE = 3


@dataclass
class Peer:
    process: subprocess.Popen[str]
    lines: queue.Queue[str]

    def ask(self, cmd: str, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.lines.get(timeout=WAIT_S))
        assert "error" not in answer, answer["error"]
        return answer


@dataclass
class Rig:
    env: dict[str, str]
    bridge_log: Path
    peer: Peer

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ros_bridge.cli", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_peer(env: dict[str, str], domain: int) -> Peer:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.ros2_peer", "--domain", str(domain)],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    assert json.loads(lines.get(timeout=WAIT_S)) == {"ready": True}
    return Peer(process, lines)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    domain = random.randint(1, 200)
    env = {**os.environ, "CYCLONEDDS_URI": LOOPBACK_CONFIG, "ROS_DOMAIN_ID": str(domain)}
    env["PYTHONUNBUFFERED"] = "1"
    log_path = tmp_path_factory.mktemp("graph") / "bridge.log"
    log = open(log_path, "w")  # noqa: SIM115
    cmd = [sys.executable, "-m", "ros_bridge.cli", "run", "--start_server", "false"]
    cmd += ["--port", str(_free_port()), "--camera", "/robot/camera/image_raw"]
    bridge = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    peer = None
    try:
        peer = _start_peer(env, domain)
        yield Rig(env, log_path, peer)
    finally:
        if peer is not None:
            peer.process.communicate('{"cmd": "quit"}\n', timeout=30)
        bridge.send_signal(signal.SIGINT)
        try:
            bridge.wait(30)
        except subprocess.TimeoutExpired:
            bridge.kill()
            bridge.wait(10)
        log.close()


def _bridge_node(rig: Rig) -> dict[str, Any] | None:
    nodes = rig.peer.ask("graph")["nodes"]
    return next((n for n in nodes if n["name"] == "vla_bridge" and n["namespace"] == "/"), None)


def test_a_ros2_node_sees_the_bridge_with_its_endpoints(rig: Rig) -> None:
    services = ("get_parameters", "get_parameter_types", "set_parameters")
    services += ("set_parameters_atomically", "list_parameters", "describe_parameters")
    readers = {"rt/robot/camera/image_raw"} | {f"rq/vla_bridge/{s}Request" for s in services}
    writers = {"rt/rosout", "rt/parameter_events", "rt/diagnostics", "rt/commands"}
    writers |= {f"rr/vla_bridge/{s}Reply" for s in services}

    def announced() -> bool:
        # the node's endpoints come one by one: wait for the whole node, every one discovered
        node = _bridge_node(rig)
        return node is not None and (set(node["readers"]), set(node["writers"])) == (
            readers,
            writers,
        )

    wait_until(announced, "the bridge and its endpoints in ros_discovery_info")


def test_parameters_over_services_rosout_and_parameter_events(rig: Rig) -> None:
    peer = rig.peer
    result = peer.ask(
        "set", node=BRIDGE, name="deadline_ms", value={"type": DOUBLE, "double_value": 80.0}
    )
    assert result == {"successful": True, "reason": ""}
    assert peer.ask("get", node=BRIDGE, name="deadline_ms")["value"]["double_value"] == 80.0

    def event() -> list[Any]:
        events = peer.ask("events")["items"]
        return [e for e in events if e["node"] == BRIDGE and e["changed_parameters"]]

    (change,) = wait_until(event, "the /parameter_events message")
    (changed,) = change["changed_parameters"]
    assert changed["name"] == "deadline_ms" and changed["value"]["double_value"] == 80.0

    def latency_budget() -> str | None:
        status = peer.ask("diagnostics")["status"].get("vla_bridge: latency")
        return status and status["values"]["deadline_ms"] == "80.00"

    wait_until(latency_budget, "the node's own budget (/diagnostics) at the new deadline")

    # A /rosout reader that joins now still gets the line logged before it (transient local).
    joined_ns = peer.ask("join_rosout")["joined_ns"]

    def line(words: str) -> list[dict[str, Any]]:
        return [x for x in peer.ask("rosout")["items"] if words in x["msg"]]

    (before,) = wait_until(lambda: line("parameters set: deadline_ms=80.0"), "the earlier log line")
    stamp_ns = before["stamp"]["sec"] * 1_000_000_000 + before["stamp"]["nanosec"]
    assert stamp_ns < joined_ns
    assert (before["level"], before["name"], before["function"]) == (
        20,
        "vla_bridge",
        "_on_set_parameters",
    )
    assert before["file"].endswith("bridge_node.py") and before["line"] > 0

    refused = peer.ask("set", node=BRIDGE, name="output", value={"type": 4, "string_value": "x"})
    assert not refused["successful"] and "read-only" in refused["reason"]
    far = peer.ask(
        "set", node=BRIDGE, name="deadline_ms", value={"type": DOUBLE, "double_value": -5.0}
    )
    assert not far["successful"] and "out of range" in far["reason"]
    assert peer.ask("get", node=BRIDGE, name="deadline_ms")["value"]["double_value"] == 80.0

    assert peer.ask("set", node=BRIDGE, name="num_actions", value={"type": 2, "integer_value": 2})[
        "successful"
    ]
    (after,) = wait_until(
        lambda: line("parameters set: num_actions=2"), "a line logged after joining"
    )
    assert after["stamp"]["sec"] * 1_000_000_000 + after["stamp"]["nanosec"] > joined_ns


def test_vla_bridge_node_list_and_param_against_the_running_bridge(rig: Rig) -> None:
    def listed() -> bool:
        names = rig.cli("node", "list").stdout.split()
        return BRIDGE in names and "/ros2_peer" in names  # the peer is no shim node

    wait_until(listed, "vla-bridge node list to show the bridge and the ROS 2 peer")
    done = rig.cli("param", "set", BRIDGE, "deadline_ms", "120")  # an int for a double: sent as one
    assert (done.returncode, done.stdout.strip()) == (0, "Set parameter successful"), done.stderr
    got = rig.cli("param", "get", BRIDGE, "deadline_ms")
    assert (got.returncode, got.stdout.strip()) == (0, "Double value is: 120.0"), got.stderr
    topics = rig.cli("param", "get", BRIDGE, "image_topics")
    assert topics.stdout.strip() == "String values are: ['image']"
    refused = rig.cli("param", "set", BRIDGE, "on_late", "brake")
    assert refused.returncode == 1 and "hold, zero, stop" in refused.stderr
    names = rig.cli("param", "list", BRIDGE).stdout.split()
    assert {"deadline_ms", "on_late", "use_sim_time"} <= set(names)
    missing = rig.cli("param", "get", "/no_such_node", "x", "--timeout", "1")
    assert missing.returncode == 1 and "Node not found" in missing.stderr


def test_the_shims_graph_sees_the_ros2_node(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shim node's graph queries answer for a node the shim did not make."""
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_CONFIG)
    context = Context()
    rclpy.init(context=context, domain_id=int(rig.env["ROS_DOMAIN_ID"]), transport="dds")
    try:
        node = Node("_graph_probe", context=context)
        wait_until(
            lambda: ("ros2_peer", "/") in node.get_node_names_and_namespaces(), "the peer's node"
        )
        peer_reads = ("/parameter_events", ["rcl_interfaces/msg/ParameterEvent"])
        wait_until(
            lambda: peer_reads in node.get_subscriber_names_and_types_by_node("ros2_peer", "/"),
            "the peer's readers, by node",
        )
        # /diagnostics: the bridge writes it, the peer reads it, this node does neither
        wait_until(lambda: node.count_subscribers("/diagnostics") == 1, "the peer's reader")
        assert node.count_publishers("/diagnostics") == 1
    finally:
        context.try_shutdown()
