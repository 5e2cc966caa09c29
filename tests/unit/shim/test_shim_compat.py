"""`ros_bridge.compat`: real ROS 2 when importable, else the shim; ordinary rclpy code runs on it.

`ExampleNode` is written exactly as a Jazzy node would be (only the imports go through compat):
parameters with descriptors, an on-set callback, a sensor-data camera subscription, a command
publisher stamped with the camera frame's stamp, a diagnostics timer, a MultiThreadedExecutor.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ros_bridge import compat
from ros_bridge.compat import (
    builtin_interfaces,
    diagnostic_msgs,
    rcl_interfaces,
    rclpy,
    sensor_msgs,
    std_msgs,
    trajectory_msgs,
)

ROS_PACKAGES = (
    "rclpy",
    "builtin_interfaces",
    "std_msgs",
    "sensor_msgs",
    "trajectory_msgs",
    "diagnostic_msgs",
    "rcl_interfaces",
)


def test_shim_is_chosen_exactly_when_ros_is_missing() -> None:
    if importlib.util.find_spec("rclpy") is None:
        assert compat.USING_SHIM
    assert (rclpy.__name__ == "ros_bridge.shim.rclpy") is compat.USING_SHIM
    assert (sensor_msgs.__name__ == "ros_bridge.shim.sensor_msgs") is compat.USING_SHIM
    for package in ROS_PACKAGES:  # the shim never installs top-level ROS names
        spec = importlib.util.find_spec(package)
        assert spec is None or "ros_bridge" not in (spec.origin or "")


# Run in `python -I`: no PYTHONPATH (how a sourced ROS 2 exposes rclpy), no cwd, no user site, so
# only what is installed into this interpreter's own site-packages can be found.
_INSTALLED_NAMES = """
import importlib.metadata, importlib.util, json, sys

dist = importlib.metadata.distribution("vla-server")
names = set((dist.read_text("top_level.txt") or "").split())
for file in dist.files or []:
    parts = file.parts
    if parts[0] == ".." or parts[0].endswith((".dist-info", ".pth")) or parts[0] == "__pycache__":
        continue
    if file.name.startswith("__editable__") and file.suffix == ".py":
        finder = sys.modules.get(file.stem) or importlib.import_module(file.stem)
        names.update(finder.MAPPING)  # what the editable install maps to source folders
    else:
        names.add(parts[0].removesuffix(".py"))  # a wheel install lists every file
specs = {p: importlib.util.find_spec(p) for p in sys.argv[1:]}
print(json.dumps({
    "top_level": sorted(names),
    "found": {p: spec.origin for p, spec in specs.items() if spec is not None},
}))
"""


def test_nothing_named_like_ros_is_installed_into_site_packages(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-c", _INSTALLED_NAMES, *ROS_PACKAGES],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    installed = json.loads(done.stdout)
    assert "ros_bridge" in installed["top_level"]  # the distribution's names were read at all
    assert not set(installed["top_level"]) & set(ROS_PACKAGES)
    if importlib.util.find_spec("rclpy") is None:  # real ROS absent: nothing may answer
        assert installed["found"] == {}


def test_real_ros_attribute_paths_exist() -> None:
    paths = [
        rclpy.init,
        rclpy.shutdown,
        rclpy.try_shutdown,
        rclpy.ok,
        rclpy.spin,
        rclpy.spin_once,
        rclpy.node.Node,
        rclpy.qos.QoSProfile,
        rclpy.qos.qos_profile_sensor_data,
        rclpy.qos.qos_profile_system_default,
        rclpy.qos.ReliabilityPolicy.BEST_EFFORT,
        rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL,
        rclpy.qos.HistoryPolicy.KEEP_LAST,
        rclpy.executors.SingleThreadedExecutor,
        rclpy.executors.MultiThreadedExecutor,
        rclpy.executors.ExternalShutdownException,
        rclpy.parameter.Parameter,
        rclpy.callback_groups.ReentrantCallbackGroup,
        rclpy.callback_groups.MutuallyExclusiveCallbackGroup,
        rclpy.time.Time,
        rclpy.duration.Duration,
        rclpy.clock.Clock,
        rclpy.logging.get_logger,
        rclpy.serialization.serialize_message,
        rclpy.serialization.deserialize_message,
        rcl_interfaces.msg.ParameterDescriptor,
        rcl_interfaces.msg.SetParametersResult,
        builtin_interfaces.msg.Time,
        builtin_interfaces.msg.Duration,
        std_msgs.msg.Header,
        std_msgs.msg.Float64MultiArray,
        std_msgs.msg.MultiArrayLayout,
        std_msgs.msg.MultiArrayDimension,
        sensor_msgs.msg.Image,
        sensor_msgs.msg.CompressedImage,
        sensor_msgs.msg.JointState,
        trajectory_msgs.msg.JointTrajectory,
        trajectory_msgs.msg.JointTrajectoryPoint,
        diagnostic_msgs.msg.DiagnosticArray,
        diagnostic_msgs.msg.DiagnosticStatus,
        diagnostic_msgs.msg.KeyValue,
    ]
    assert all(p is not None for p in paths)


def test_type_names_and_lookup() -> None:
    assert compat.message_type_name(sensor_msgs.msg.Image) == "sensor_msgs/msg/Image"
    assert compat.get_message("trajectory_msgs/msg/JointTrajectory") is (
        trajectory_msgs.msg.JointTrajectory
    )


class ExampleNode(rclpy.node.Node):
    def __init__(self) -> None:
        super().__init__("example_bridge")
        describe = rcl_interfaces.msg.ParameterDescriptor
        self.declare_parameter("image_topic", "image", describe(description="camera topic"))
        self.declare_parameter(
            "joint_names", ["j1", "j2"], describe(description="joints, in command order")
        )
        self.declare_parameter("budget_ms", 40.0, describe(description="P99 ITL budget"))
        self.add_on_set_parameters_callback(self.on_set)
        self.camera_group = rclpy.callback_groups.MutuallyExclusiveCallbackGroup()
        self.create_subscription(
            sensor_msgs.msg.Image,
            self.get_parameter("image_topic").value,
            self.on_image,
            rclpy.qos.qos_profile_sensor_data,
            callback_group=self.camera_group,
        )
        self.commands = self.create_publisher(std_msgs.msg.Float64MultiArray, "~/commands", 10)
        self.diagnostics = self.create_publisher(
            diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", 1
        )
        self.create_timer(0.02, self.publish_diagnostics)
        self.stamps: list[Any] = []

    def on_set(self, params: list[Any]) -> Any:
        for param in params:
            if param.name == "budget_ms" and param.value <= 0.0:
                return rcl_interfaces.msg.SetParametersResult(successful=False, reason="> 0")
        return rcl_interfaces.msg.SetParametersResult(successful=True)

    def on_image(self, msg: Any) -> None:
        joints = self.get_parameter("joint_names").value
        command = std_msgs.msg.Float64MultiArray(data=[float(msg.width)] * len(joints))
        self.stamps.append(msg.header.stamp)
        self.commands.publish(command)

    def publish_diagnostics(self) -> None:
        status = diagnostic_msgs.msg.DiagnosticStatus(
            level=diagnostic_msgs.msg.DiagnosticStatus.OK,
            name=f"{self.get_name()}: latency",
            message="ok",
            hardware_id="none",
            values=[diagnostic_msgs.msg.KeyValue(key="budget_ms", value="40.0")],
        )
        array = diagnostic_msgs.msg.DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics.publish(array)


@pytest.fixture
def ros(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Pinned through the environment: real rclpy.init has no `transport` argument.
    monkeypatch.setenv("VLA_SHIM_TRANSPORT", "inproc")
    rclpy.init(args=["--ros-args", "-r", "image:=/camera/image_raw"])
    try:
        yield
    finally:
        rclpy.try_shutdown()


def test_ordinary_rclpy_node_runs_on_compat(ros: None) -> None:
    node = ExampleNode()
    probe = rclpy.node.Node("probe")
    commands: list[Any] = []
    diagnostics: list[Any] = []
    probe.create_subscription(
        std_msgs.msg.Float64MultiArray, "/example_bridge/commands", commands.append, 10
    )
    probe.create_subscription(
        diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", diagnostics.append, 10
    )
    camera = probe.create_publisher(sensor_msgs.msg.Image, "/camera/image_raw", 5)
    executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        frame = sensor_msgs.msg.Image(height=1, width=3, encoding="mono8", step=3, data=b"abc")
        frame.header.stamp = builtin_interfaces.msg.Time(sec=42, nanosec=7)
        camera.publish(frame)
        deadline = time.monotonic() + 20
        while not (commands and diagnostics) and time.monotonic() < deadline:
            time.sleep(0.01)
        (result,) = node.set_parameters([rclpy.parameter.Parameter("budget_ms", value=-1.0)])
    finally:
        executor.shutdown(timeout_sec=10)
        spinner.join(timeout=10)
        node.destroy_node()
        probe.destroy_node()
    assert list(commands[0].data) == [3.0, 3.0]
    assert node.stamps == [builtin_interfaces.msg.Time(sec=42, nanosec=7)]
    assert diagnostics[0].status[0].level == b"\x00"
    assert not result.successful and node.get_parameter("budget_ms").value == 40.0
