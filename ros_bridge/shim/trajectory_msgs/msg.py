"""trajectory_msgs/msg: JointTrajectory, as joint_trajectory_controller takes it."""

from __future__ import annotations

from ros_bridge.shim.builtin_interfaces.msg import Duration
from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import Message
from ros_bridge.shim.std_msgs.msg import Header


class JointTrajectoryPoint(Message):
    _type_name_ = "trajectory_msgs/msg/JointTrajectoryPoint"
    _type_hash_ = "RIHS01_de8907036d8bd45aac6f30cc9044a3d4a329c42cbf719aff7d95a584cfa532d7"
    _fields_ = (
        ("positions", seq("float64")),
        ("velocities", seq("float64")),
        ("accelerations", seq("float64")),
        ("effort", seq("float64")),
        ("time_from_start", Duration),
    )


class JointTrajectory(Message):
    _type_name_ = "trajectory_msgs/msg/JointTrajectory"
    _type_hash_ = "RIHS01_179b33eba59d676f6d967ac71fe35e7ca2f64b2f3928f4a018cec115e213796e"
    _fields_ = (
        ("header", Header),
        ("joint_names", seq("string")),
        ("points", seq(JointTrajectoryPoint)),
    )
