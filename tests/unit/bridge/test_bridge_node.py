"""VlaBridgeNode on the shim (in-process transport) against a scripted server.

A separate probe node publishes camera frames and subscribes to the commands and /diagnostics,
as a robot's other nodes would.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ros_bridge.bridge_node import VlaBridgeNode
from ros_bridge.bridge_params import PARAM_RANGES, PARAMS
from ros_bridge.compat import (
    builtin_interfaces,
    diagnostic_msgs,
    rclpy,
    sensor_msgs,
    trajectory_msgs,
)
from tests.support.bridge_fakes import FakeServer
from tests.support.waiting import Spinning

Parameter = rclpy.parameter.Parameter
PIXELS = np.random.default_rng(3).integers(0, 256, size=(8, 10, 3), dtype=np.uint8)


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


class Rig:
    def __init__(
        self, server: FakeServer, cli_args: list[str] | None = None, **params: Any
    ) -> None:
        overrides = {
            "diagnostics_period_s": 0.05,
            "output": "joint_trajectory",
            "joint_names": ["a", "b", "c"],
            "deadline_ms": 30_000.0,
            **params,
        }
        self.node = VlaBridgeNode(
            http_transport=server.transport(),
            parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
            cli_args=cli_args,
        )
        self.probe = rclpy.node.Node("probe")
        self.commands: list[Any] = []
        self.diagnostics: list[Any] = []
        self.probe.create_subscription(
            trajectory_msgs.msg.JointTrajectory, "/commands", self.commands.append, 100
        )
        self.probe.create_subscription(
            diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", self.diagnostics.append, 100
        )
        compressed = self.node.get_parameter("compressed").value
        msg_type = sensor_msgs.msg.CompressedImage if compressed else sensor_msgs.msg.Image
        self.cameras = {  # the camera topics the node resolved (namespace, remaps)
            sub.topic_name: self.probe.create_publisher(msg_type, sub.topic_name, 5)
            for sub in self.node.subscriptions
            if sub.msg_type is msg_type  # not joint_states_topic's subscription
        }
        executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
        self.spinning = Spinning(executor, self.node, self.probe)

    def publish(self, msg: Any, topic: str | None = None) -> None:
        self.cameras[topic or next(iter(self.cameras))].publish(msg)

    def statuses(self) -> dict[str, Any]:
        return {s.name.split(": ")[1]: s for s in self.diagnostics[-1].status}

    def close(self) -> None:
        self.spinning.stop()


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Rig]]:
    monkeypatch.setenv("VLA_SHIM_TRANSPORT", "inproc")
    rclpy.init(args=[])
    rigs: list[Rig] = []

    def make(server: FakeServer, **params: Any) -> Rig:
        rigs.append(Rig(server, **params))
        return rigs[-1]

    try:
        yield make
    finally:
        for r in rigs:
            r.close()
        rclpy.try_shutdown()


def image(sec: int, pixels: np.ndarray = PIXELS, **fields: Any) -> Any:
    height, width = pixels.shape[:2]
    msg = sensor_msgs.msg.Image(
        height=height, width=width, encoding="rgb8", step=width * 3, data=pixels.tobytes()
    )
    for name, value in fields.items():
        setattr(msg, name, value)
    msg.header.stamp = builtin_interfaces.msg.Time(sec=sec, nanosec=500)
    return msg


def test_parameters_are_declared_with_descriptions_and_guarded(rig) -> None:
    r = rig(FakeServer())
    for spec in PARAMS:
        descriptor = r.node.describe_parameter(spec.name)
        assert descriptor.description == spec.description
        assert descriptor.read_only is (not spec.dynamic)
    (refused,) = r.node.set_parameters([Parameter("server_url", value="http://elsewhere")])
    assert not refused.successful
    results = r.node.set_parameters(
        [
            Parameter("on_late", value="brake"),
            Parameter("deadline_ms", value=-1.0),
            Parameter("ttft_budget_ms", value=0.0),
            Parameter("deadline_ms", value=120.0),
        ]
    )
    assert [res.successful for res in results] == [False, False, False, True]
    assert "hold, zero, stop" in results[0].reason
    assert r.node.worker.config.deadline_ms == 120.0
    assert r.node.monitor.budgets.deadline_ms == 120.0


def test_camera_subscription_uses_sensor_data_qos(rig) -> None:
    r = rig(FakeServer())
    (sub,) = list(r.node.subscriptions)
    sensor = rclpy.qos.qos_profile_sensor_data
    assert (
        sub.qos_profile.reliability == sensor.reliability == rclpy.qos.ReliabilityPolicy.BEST_EFFORT
    )
    assert sub.qos_profile.depth == sensor.depth == 5


def test_actions_become_stamped_trajectories_and_instruction_changes_live(rig) -> None:
    server = FakeServer(action_dim=3)
    r = rig(server, num_actions=2, control_rate_hz=20.0)
    r.publish(image(41))
    wait_for(lambda: len(r.commands) == 2)
    assert [(c.header.stamp.sec, c.header.stamp.nanosec) for c in r.commands] == [(41, 500)] * 2
    assert [c.points[0].time_from_start.nanosec for c in r.commands] == [50_000_000, 100_000_000]
    assert list(r.commands[1].points[0].positions) == [1.0, 1.0, 1.0]
    assert list(r.commands[0].joint_names) == ["a", "b", "c"]
    (ok,) = r.node.set_parameters([Parameter("instruction", value="open the drawer")])
    assert ok.successful
    r.publish(image(42))
    wait_for(lambda: len(r.commands) == 4)
    assert [b["text"] for b in server.accepted] == ["pick up the cube", "open the drawer"]


def bad_frames() -> list[tuple[Any, str]]:
    good = image(1)
    return [
        (image(1, encoding="32FC1"), "unsupported encoding"),
        (image(1, height=0, width=0, step=0, data=b""), "empty image"),
        (image(1, step=29), "step*height"),
        (image(1, data=bytes(good.data)[:-3]), "step*height"),
    ]


def warned(r: Rig, words: str) -> bool:
    warn = diagnostic_msgs.msg.DiagnosticStatus.WARN
    return any(s.level == warn and words in s.message for d in r.diagnostics for s in d.status)


def test_bad_frames_are_dropped_with_a_warning_and_good_ones_still_flow(rig) -> None:
    r = rig(FakeServer(action_dim=3), num_actions=1)
    for n, (msg, words) in enumerate(bad_frames(), start=1):
        r.publish(msg)
        wait_for(lambda n=n: r.node.monitor.counters["frames_dropped_bad"] == n)
        wait_for(lambda words=words: warned(r, words))
    r.publish(image(7))
    wait_for(lambda: len(r.commands) == 1)
    assert r.node.monitor.counters["frames_in"] == 5
    wait_for(lambda: r.statuses()["camera input"].level == diagnostic_msgs.msg.DiagnosticStatus.OK)


def test_undecodable_compressed_frame_is_dropped(rig) -> None:
    r = rig(FakeServer(action_dim=3), compressed=True, num_actions=1)
    broken = sensor_msgs.msg.CompressedImage(
        format="rgb8; jpeg compressed bgr8", data=b"\xff\xd8\xff\xe0garbage"
    )
    r.publish(broken)
    wait_for(lambda: r.node.monitor.counters["frames_dropped_bad"] == 1)
    wait_for(lambda: warned(r, "image: undecodable compressed image"))
    buf = io.BytesIO()
    Image.fromarray(PIXELS).save(buf, format="PNG")
    fine = sensor_msgs.msg.CompressedImage(format="rgb8; png compressed bgr8", data=buf.getvalue())
    fine.header.stamp.sec = 9
    r.publish(fine)
    wait_for(lambda: len(r.commands) == 1)
    assert r.commands[0].header.stamp.sec == 9


def test_a_new_session_is_opened_before_its_first_request(rig) -> None:
    server = FakeServer(action_dim=3)
    server.known_fields |= {"session_id", "supersede", "deadline_ms", "control_period_ms"}
    r = rig(server, num_actions=1, session="episode-1")
    for sec in (1, 2):
        r.publish(image(sec))
        wait_for(lambda sec=sec: len(r.commands) == sec)
    (ok,) = r.node.set_parameters([Parameter("session", value="episode-2")])
    assert ok.successful
    r.publish(image(3))
    wait_for(lambda: len(r.commands) == 3)
    assert server.posts == [
        ("/open_session", "episode-1"),
        ("/generate", "episode-1"),
        ("/generate", "episode-1"),  # an open session is not reopened per frame
        ("/open_session", "episode-2"),
        ("/generate", "episode-2"),
    ]


def test_two_cameras_send_two_images_per_request(rig) -> None:
    server = FakeServer(action_dim=3)
    r = rig(server, image_topics=["/left", "/right"], num_actions=1)
    r.publish(image(1), "/left")  # no frame from /right yet: nothing is sent
    wait_for(lambda: r.node.monitor.counters["frames_in"] == 1)
    r.publish(image(2, PIXELS[::-1].copy()), "/right")
    time.sleep(0.1)
    r.publish(image(3), "/left")
    wait_for(lambda: len(r.commands) == 1)
    (body,) = server.accepted
    assert len(body["image_data"]) == 2 and len(set(body["mm_hashes"])) == 2
    assert r.commands[0].header.stamp.sec == 3  # the trigger camera's stamp


def joint_state(stamp_ns: int, position: float) -> Any:
    msg = sensor_msgs.msg.JointState(name=["a", "b", "c"], position=[position] * 3)
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    msg.header.stamp = builtin_interfaces.msg.Time(sec=sec, nanosec=nanosec)
    return msg


def offset_ns(command: Any) -> int:
    tfs = command.points[0].time_from_start
    return tfs.sec * 1_000_000_000 + tfs.nanosec


def test_executor_answers_each_joint_state_with_the_command_for_the_next_period(rig) -> None:
    """Lockstep: a state stamped t gets the command for t + 20 ms. The fake server's chunk for
    the frame stamped F is [0]*3, [1]*3, [2]*3, due at F + 100, 200, 300 ms (10 Hz actions)."""
    r = rig(
        FakeServer(action_dim=3),
        num_actions=3,
        executor="interpolate",
        action_rate_hz=10.0,
        control_rate_hz=50.0,
        joint_states_topic="/joint_states",
    )
    states = r.probe.create_publisher(sensor_msgs.msg.JointState, "/joint_states", 10)
    frame_ns = 41 * 1_000_000_000 + 500
    states.publish(joint_state(frame_ns - 20_000_000, 0.5))  # no chunk yet: hold the arm
    wait_for(lambda: len(r.commands) == 1)
    held = r.commands[0]
    assert (held.header.stamp.sec, held.header.stamp.nanosec) == (41, 500)  # its target
    assert offset_ns(held) == 0 and list(held.points[0].positions) == [0.5] * 3
    r.publish(image(41))
    wait_for(lambda: r.node.chunk_output.executor.counters.actions_received == 3)
    states.publish(joint_state(frame_ns + 230_000_000, 0.5))  # for F + 250 ms: halfway 1 -> 2
    wait_for(lambda: len(r.commands) == 2)
    command = r.commands[1]
    assert (command.header.stamp.sec, command.header.stamp.nanosec) == (41, 500)  # the frame
    assert offset_ns(command) == 250_000_000
    assert list(command.points[0].positions) == pytest.approx([1.5] * 3)
    states.publish(joint_state(frame_ns + 400_000_000, 0.5))  # past the chunk: on_late hold
    wait_for(lambda: len(r.commands) == 3)
    assert offset_ns(r.commands[2]) == 0
    assert list(r.commands[2].points[0].positions) == pytest.approx([1.5] * 3)


def test_executor_on_a_timer_commands_the_chunk_at_each_ticks_offset(rig) -> None:
    """Without joint states the executor ticks on the node's clock: each command is the
    chunk's interpolation at its own offset from the frame stamp (actions [i]*3 due at
    F + (i + 1) * 2 s; the frame is stamped 2.5 s ago, so the chunk covers the next 3.5 s)."""
    r = rig(
        FakeServer(action_dim=3, token_delay_s=0.0),
        num_actions=3,
        executor="interpolate",
        action_rate_hz=0.5,
        control_rate_hz=50.0,
    )
    frame_ns = time.time_ns() - 2_500_000_000
    msg = image(0)
    sec, nanosec = divmod(frame_ns, 1_000_000_000)
    msg.header.stamp = builtin_interfaces.msg.Time(sec=sec, nanosec=nanosec)
    r.publish(msg)
    wait_for(lambda: len([c for c in r.commands if offset_ns(c) > 0]) >= 3)
    for c in [c for c in r.commands if offset_ns(c) > 0]:
        assert (c.header.stamp.sec, c.header.stamp.nanosec) == (sec, nanosec)
        expected = min(max(offset_ns(c) / 2_000_000_000 - 1.0, 0.0), 2.0)
        assert list(c.points[0].positions) == pytest.approx([expected] * 3)


def test_on_late_changed_at_runtime_reaches_the_executor(rig) -> None:
    r = rig(FakeServer(action_dim=3), executor="hold", joint_states_topic="/joint_states")
    states = r.probe.create_publisher(sensor_msgs.msg.JointState, "/joint_states", 10)
    states.publish(joint_state(5 * 1_000_000_000, 0.5))
    wait_for(lambda: len(r.commands) == 1)
    assert list(r.commands[0].points[0].positions) == [0.5] * 3  # hold: the arm's position
    (ok,) = r.node.set_parameters([Parameter("on_late", value="zero")])
    assert ok.successful
    states.publish(joint_state(6 * 1_000_000_000, 0.5))
    wait_for(lambda: len(r.commands) == 2)
    assert list(r.commands[1].points[0].positions) == [0.0] * 3


def test_warnings_name_the_remapped_topic(rig, caplog: pytest.LogCaptureFixture) -> None:
    remap = ["--ros-args", "-r", "image:=/robot/wrist/image_raw/compressed"]
    r = rig(FakeServer(action_dim=3), cli_args=remap, compressed=True, num_actions=1)
    broken = sensor_msgs.msg.CompressedImage(format="rgb8; jpeg compressed bgr8", data=b"\xff\xd8")
    r.publish(broken)
    wait_for(lambda: warned(r, "/robot/wrist/image_raw/compressed: undecodable compressed image"))
    assert "dropped a frame on /robot/wrist/image_raw/compressed: undecodable" in caplog.text


def test_a_late_trajectory_carries_the_stamp_of_the_frame_it_replaces(rig) -> None:
    server = FakeServer(action_dim=3)
    r = rig(server, num_actions=1, deadline_ms=150.0, on_late="hold")
    r.publish(image(1))
    wait_for(lambda: len(r.commands) == 1)
    server.first_token_delay_s = 1.0  # the next frame misses its deadline
    r.publish(image(2))
    wait_for(lambda: len(r.commands) >= 2)
    held = r.commands[1]
    assert held.header.stamp.sec == 2 and held.header.stamp.nanosec == 500  # not the clock's now
    assert list(held.points[0].positions) == list(r.commands[0].points[0].positions)
    assert held.points[0].time_from_start.sec == held.points[0].time_from_start.nanosec == 0


def test_bounded_parameters_declare_their_ranges(rig, caplog: pytest.LogCaptureFixture) -> None:
    r = rig(FakeServer())
    (deadline,) = r.node.describe_parameter("deadline_ms").floating_point_range
    assert (deadline.from_value, deadline.to_value) == PARAM_RANGES["deadline_ms"]
    (actions,) = r.node.describe_parameter("num_actions").integer_range
    assert (actions.from_value, actions.to_value, actions.step) == (1, 1024, 1)
    (too_many,) = r.node.set_parameters([Parameter("num_actions", value=5000)])
    assert not too_many.successful and "out of range" in too_many.reason
    assert r.node.set_parameters([Parameter("num_actions", value=4)])[0].successful
    assert "parameters set: num_actions=4" in caplog.text
