"""The robots the demo checkpoints drive, as joint ranges (family-neutral facts).

gym-aloha's bimanual action and joint state: per arm 6 joint positions (rad) + the gripper
normalised to [0, 1] (0 closed, 1 open); the same ranges for both arms. They stay inside the
ViperX joint limits, around the simulator's start pose, so that any output of a random-weight
demo model is a valid, reachable joint target.
"""

from __future__ import annotations

_ALOHA_ARM_Q01 = [-0.5, -1.2, 0.6, -0.5, -0.8, -0.5, 0.0]
_ALOHA_ARM_Q99 = [0.5, -0.2, 1.4, 0.5, 0.4, 0.5, 1.0]
ALOHA_Q01 = _ALOHA_ARM_Q01 * 2
ALOHA_Q99 = _ALOHA_ARM_Q99 * 2
ALOHA_DIM = len(ALOHA_Q01)
ALOHA_CAMERA = "top"  # the camera `vla-bridge sim` publishes by default


def aloha_stats(spread: float = 6.0) -> dict[str, list[float]]:
    """Statistics over the ALOHA ranges: q01/q99 as given, the mean at the middle and the std
    at 1/`spread` of the range, so that a normalised value within ±spread/2 stays inside."""
    return {
        "q01": list(ALOHA_Q01),
        "q99": list(ALOHA_Q99),
        "mean": [(lo + hi) / 2 for lo, hi in zip(ALOHA_Q01, ALOHA_Q99, strict=True)],
        "std": [(hi - lo) / spread for lo, hi in zip(ALOHA_Q01, ALOHA_Q99, strict=True)],
    }
