"""on_late policies and the controller messages actions become (shim messages, rosbags CDR)."""

from __future__ import annotations

import numpy as np
import pytest

from ros_bridge.action_output import action_message, late_message, output_type
from ros_bridge.bags import jazzy_typestore
from ros_bridge.compat import rclpy
from ros_bridge.late_policy import LateCommand, OnLate, late_command, parse_on_late
from ros_bridge.output_modes import FLOAT64_MULTIARRAY, JOINT_TRAJECTORY

JOINTS = ["j1", "j2", "j3"]


def test_late_command_per_policy() -> None:
    last = (0.1, 0.2, 0.3)
    assert late_command(OnLate.HOLD, last, 3) == LateCommand(OnLate.HOLD, last)
    assert late_command(OnLate.HOLD, None, 3) is None  # nothing to hold yet
    assert late_command(OnLate.ZERO, None, 3) == LateCommand(OnLate.ZERO, (0.0, 0.0, 0.0))
    assert late_command(OnLate.ZERO, (1.0, 2.0), None) == LateCommand(OnLate.ZERO, (0.0, 0.0))
    assert late_command(OnLate.ZERO, None, None) is None
    assert late_command(OnLate.STOP, last, 3) == LateCommand(OnLate.STOP, None)
    assert parse_on_late("zero") is OnLate.ZERO
    with pytest.raises(ValueError, match="hold, zero, stop"):
        parse_on_late("brake")


def test_float64_multiarray_carries_the_action() -> None:
    msg = action_message(
        FLOAT64_MULTIARRAY,
        (1.0, -2.5, 3.0),
        stamp=(5, 6),
        index=0,
        joint_names=JOINTS,
        control_rate_hz=10.0,
    )
    assert list(msg.data) == [1.0, -2.5, 3.0]
    with pytest.raises(ValueError, match="2 values but joint_names lists 3"):
        action_message(
            FLOAT64_MULTIARRAY,
            (1.0, 2.0),
            stamp=(0, 0),
            index=0,
            joint_names=JOINTS,
            control_rate_hz=10.0,
        )


@pytest.mark.parametrize(
    ("index", "rate", "sec", "nanosec"),
    [(0, 10.0, 0, 100_000_000), (4, 10.0, 0, 500_000_000), (2, 2.0, 1, 500_000_000)],
)
def test_trajectory_point_is_stamped_and_timed(
    index: int, rate: float, sec: int, nanosec: int
) -> None:
    action = (0.5, 0.25, -1.0)
    msg = action_message(
        JOINT_TRAJECTORY,
        action,
        stamp=(1735689600, 7),
        index=index,
        joint_names=JOINTS,
        control_rate_hz=rate,
    )
    # Decode the shim's CDR with rosbags: what a real ROS 2 subscriber would read.
    raw = rclpy.serialization.serialize_message(msg)
    decoded = jazzy_typestore().deserialize_cdr(raw, "trajectory_msgs/msg/JointTrajectory")
    assert (decoded.header.stamp.sec, decoded.header.stamp.nanosec) == (1735689600, 7)
    assert decoded.joint_names == JOINTS
    (point,) = decoded.points
    assert np.array_equal(point.positions, action)
    assert (point.time_from_start.sec, point.time_from_start.nanosec) == (sec, nanosec)


def test_late_messages() -> None:
    zero = LateCommand(OnLate.ZERO, (0.0, 0.0, 0.0))
    stop = LateCommand(OnLate.STOP, None)
    assert (
        list(late_message(FLOAT64_MULTIARRAY, zero, stamp=(1, 2), joint_names=JOINTS).data)
        == [0.0] * 3
    )
    assert late_message(FLOAT64_MULTIARRAY, stop, stamp=(1, 2), joint_names=JOINTS) is None
    empty = late_message(JOINT_TRAJECTORY, stop, stamp=(1, 2), joint_names=JOINTS)
    assert empty.points == [] and list(empty.joint_names) == JOINTS  # JTC: cancel and hold
    hold = late_message(
        JOINT_TRAJECTORY,
        LateCommand(OnLate.HOLD, (1.0, 2.0, 3.0)),
        stamp=(1, 2),
        joint_names=JOINTS,
    )
    assert list(hold.points[0].positions) == [1.0, 2.0, 3.0]
    assert hold.points[0].time_from_start.sec == 0 and hold.points[0].time_from_start.nanosec == 0


def test_unknown_output_mode() -> None:
    with pytest.raises(ValueError, match="float64_multiarray, joint_trajectory"):
        output_type("twist")
