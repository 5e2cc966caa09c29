"""Action vectors as controller commands: Float64MultiArray or JointTrajectory.

`float64_multiarray` is what ros2_control's forward_command_controller takes on
`/<controller>/commands` (one value per configured joint; the type has no header, so no stamp).
`joint_trajectory` is joint_trajectory_controller's topic message: each action becomes one
point, `header.stamp` = the camera frame's stamp (so `ros2 topic delay` reads end-to-end
latency) and `time_from_start` = (index + 1) / control rate, the time the action is meant for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ros_bridge.compat import builtin_interfaces, std_msgs, trajectory_msgs
from ros_bridge.late_policy import LateCommand
from ros_bridge.output_modes import FLOAT64_MULTIARRAY, JOINT_TRAJECTORY, OUTPUT_MODES

NS_PER_S = 1_000_000_000


def output_type(mode: str) -> type:
    if mode == FLOAT64_MULTIARRAY:
        return std_msgs.msg.Float64MultiArray
    if mode == JOINT_TRAJECTORY:
        return trajectory_msgs.msg.JointTrajectory
    raise ValueError(f"output must be one of {', '.join(OUTPUT_MODES)}, got {mode!r}")


def check_width(action: Sequence[float], joint_names: Sequence[str]) -> None:
    if joint_names and len(action) != len(joint_names):
        raise ValueError(
            f"action has {len(action)} values but joint_names lists {len(joint_names)} joints"
        )


def action_message(
    mode: str,
    action: Sequence[float],
    *,
    stamp: tuple[int, int],
    index: int,
    joint_names: Sequence[str],
    control_rate_hz: float,
) -> Any:
    """The command for the `index`-th action of a frame stamped `stamp` (sec, nanosec)."""
    check_width(action, joint_names)
    if mode == FLOAT64_MULTIARRAY:
        return std_msgs.msg.Float64MultiArray(data=[float(x) for x in action])
    offset_ns = round((index + 1) * NS_PER_S / control_rate_hz)
    return _trajectory(stamp, joint_names, [(action, offset_ns)])


def late_message(
    mode: str, command: LateCommand, *, stamp: tuple[int, int], joint_names: Sequence[str]
) -> Any | None:
    """The on_late command as a message; None where the output type cannot express it."""
    if command.values is not None:
        check_width(command.values, joint_names)
    if mode == FLOAT64_MULTIARRAY:
        if command.values is None:
            return None  # stop: forward controllers keep their last command; send nothing
        return std_msgs.msg.Float64MultiArray(data=list(command.values))
    points = [] if command.values is None else [(command.values, 0)]
    return _trajectory(stamp, joint_names, points)


def _trajectory(
    stamp: tuple[int, int],
    joint_names: Sequence[str],
    points: list[tuple[Sequence[float], int]],
) -> Any:
    msg = trajectory_msgs.msg.JointTrajectory(joint_names=list(joint_names))
    msg.header.stamp = builtin_interfaces.msg.Time(sec=stamp[0], nanosec=stamp[1])
    msg.points = [
        trajectory_msgs.msg.JointTrajectoryPoint(
            positions=[float(x) for x in values],
            time_from_start=builtin_interfaces.msg.Duration(
                sec=offset_ns // NS_PER_S, nanosec=offset_ns % NS_PER_S
            ),
        )
        for values, offset_ns in points
    ]
    return msg


def chunk_command_message(
    mode: str,
    values: Sequence[float],
    *,
    source: tuple[int, int],
    offset_ns: int,
    joint_names: Sequence[str],
) -> Any:
    """An executor's command taken from a chunk: in a JointTrajectory, `header.stamp` is the
    stamp of the frame whose chunk it comes from and `time_from_start` its offset from it (so
    stamp + time_from_start is the time the command is for)."""
    check_width(values, joint_names)
    if mode == FLOAT64_MULTIARRAY:
        return std_msgs.msg.Float64MultiArray(data=[float(x) for x in values])
    return _trajectory(source, joint_names, [(values, offset_ns)])
