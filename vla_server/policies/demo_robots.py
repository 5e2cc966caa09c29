"""The robots the demo and tiny checkpoints drive, as joint ranges (family-neutral facts).

gym-aloha's bimanual action and joint state: per arm 6 joint positions (rad) + the gripper
normalised to [0, 1] (0 closed, 1 open); the same ranges for both arms. They stay inside the
ViperX joint limits, around the simulator's start pose, so that any output of a random-weight
demo model is a valid, reachable joint target.

An SO-100 arm (LeRobot's `so100_follower`): 5 joints and the gripper, named as LeRobot names
its motors (the robot's observation and action keys are `<joint>.pos`), in LeRobot's default
units: each joint in [-100, 100] of its calibrated range, the gripper in [0, 100] (0 closed);
the ranges are those of a table-top pick-and-place around the rest pose. Its cameras as
LeRobot's SO-100 examples name them (`front`, `wrist`).
"""

from __future__ import annotations

_ALOHA_ARM_Q01 = [-0.5, -1.2, 0.6, -0.5, -0.8, -0.5, 0.0]
_ALOHA_ARM_Q99 = [0.5, -0.2, 1.4, 0.5, 0.4, 0.5, 1.0]
ALOHA_Q01 = _ALOHA_ARM_Q01 * 2
ALOHA_Q99 = _ALOHA_ARM_Q99 * 2
ALOHA_DIM = len(ALOHA_Q01)
ALOHA_CAMERA = "top"  # the camera `vla-bridge sim` publishes by default


SO100_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll",
                "gripper")  # fmt: skip
SO100_Q01 = [-40.0, -95.0, -20.0, -60.0, -50.0, 0.0]
SO100_Q99 = [40.0, 15.0, 95.0, 70.0, 50.0, 45.0]
SO100_DIM = len(SO100_JOINTS)
SO100_CAMERAS = ("front", "wrist")


def range_stats(q01: list[float], q99: list[float], spread: float = 6.0) -> dict[str, list[float]]:
    """Statistics over joint ranges: q01/q99 as given, the mean at the middle and the std at
    1/`spread` of the range, so that a normalised value within ±spread/2 stays inside."""
    return {
        "q01": list(q01),
        "q99": list(q99),
        "mean": [(lo + hi) / 2 for lo, hi in zip(q01, q99, strict=True)],
        "std": [(hi - lo) / spread for lo, hi in zip(q01, q99, strict=True)],
    }


def aloha_stats(spread: float = 6.0) -> dict[str, list[float]]:
    """Statistics over the ALOHA ranges (`range_stats`)."""
    return range_stats(ALOHA_Q01, ALOHA_Q99, spread)


def so100_stats(spread: float = 6.0) -> dict[str, list[float]]:
    """Statistics over the SO-100 ranges (`range_stats`)."""
    return range_stats(SO100_Q01, SO100_Q99, spread)
