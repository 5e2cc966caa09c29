"""The one switch between real ROS 2 and the shim. Write nodes against these names only:

    from ros_bridge.compat import rclpy, sensor_msgs, rcl_interfaces
    class VlaBridgeNode(rclpy.node.Node): ...
    qos = rclpy.qos.qos_profile_sensor_data
    Image = sensor_msgs.msg.Image

Every attribute path is the real one (`rclpy.executors.MultiThreadedExecutor`,
`rcl_interfaces.msg.ParameterDescriptor`, ...), so the node reads as ordinary rclpy code and runs
unchanged on a robot. With ROS 2 sourced, these are the real packages; otherwise (or with
VLA_FORCE_SHIM=1) they are `ros_bridge.shim`'s stand-ins. It is all or nothing: a partly
importable ROS installation falls back to the shim as a whole.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

_SUBMODULES = (
    "callback_groups",
    "clock",
    "duration",
    "executors",
    "logging",
    "node",
    "parameter",
    "qos",
    "serialization",
    "time",
    "utilities",
)
_SRV_PACKAGES = ("rcl_interfaces",)
_MSG_PACKAGES = (
    "builtin_interfaces",
    "std_msgs",
    "sensor_msgs",
    "trajectory_msgs",
    "diagnostic_msgs",
    "rcl_interfaces",
)


def _load(prefix: str) -> dict[str, ModuleType]:
    """`rclpy` (submodules loaded) and the message packages (with `.msg`) under `prefix`."""
    modules = {"rclpy": importlib.import_module(prefix + "rclpy")}
    for name in _SUBMODULES:
        importlib.import_module(f"{prefix}rclpy.{name}")
    for package in _MSG_PACKAGES:
        modules[package] = importlib.import_module(prefix + package)
        importlib.import_module(f"{prefix}{package}.msg")
    for package in _SRV_PACKAGES:
        importlib.import_module(f"{prefix}{package}.srv")
    return modules


def _select() -> tuple[dict[str, ModuleType], bool]:
    if os.environ.get("VLA_FORCE_SHIM", "") not in ("", "0"):
        return _load("ros_bridge.shim."), True
    try:
        return _load(""), False
    except ImportError:
        return _load("ros_bridge.shim."), True


_modules, USING_SHIM = _select()
rclpy: Any = _modules["rclpy"]
builtin_interfaces: Any = _modules["builtin_interfaces"]
std_msgs: Any = _modules["std_msgs"]
sensor_msgs: Any = _modules["sensor_msgs"]
trajectory_msgs: Any = _modules["trajectory_msgs"]
diagnostic_msgs: Any = _modules["diagnostic_msgs"]
rcl_interfaces: Any = _modules["rcl_interfaces"]


def message_type_name(msg_type: type) -> str:
    """'sensor_msgs/msg/Image' for a message class of either implementation."""
    shim_name = getattr(msg_type, "_type_name_", "")
    if shim_name:
        return shim_name
    package = msg_type.__module__.split(".")[0]  # rosidl: sensor_msgs.msg._image
    return f"{package}/msg/{msg_type.__name__}"


def get_message(type_name: str) -> type:
    """The message class for 'sensor_msgs/msg/Image' (rosidl_runtime_py's get_message)."""
    if USING_SHIM:
        from ros_bridge.shim.message import message_class

        return message_class(type_name)
    from rosidl_runtime_py.utilities import get_message as ros_get_message

    return ros_get_message(type_name)
