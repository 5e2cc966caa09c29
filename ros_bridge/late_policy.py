"""What the bridge commands when an action is late or the server is down (ROS-free).

`hold`: repeat the last published action (a controller keeps the arm where it was sent);
`zero`: publish a zero vector (velocity-controlled arms stop);
`stop`: stop commanding: the late request is cancelled and, for joint_trajectory_controller,
an empty trajectory is sent (it cancels the running trajectory and holds position).

A command carries the stamp of the camera frame whose action it replaces (the late or failed
frame; for an outage found between requests, the newest frame received), so a trajectory's
`header.stamp` still says which frame it answers; None (no frame yet) means the node's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OnLate(StrEnum):
    HOLD = "hold"
    ZERO = "zero"
    STOP = "stop"


@dataclass(frozen=True)
class LateCommand:
    policy: OnLate
    values: tuple[float, ...] | None  # None: stop commanding
    stamp: tuple[int, int] | None = None  # (sec, nanosec) of the frame it replaces
    # The server failed or refused the request (not merely late): a chunk executor drops its
    # plan, which the server can no longer follow up; a late frame leaves it (still due).
    failed: bool = False


def parse_on_late(text: str) -> OnLate:
    try:
        return OnLate(text)
    except ValueError:
        choices = ", ".join(p.value for p in OnLate)
        raise ValueError(f"on_late must be one of {choices}, got {text!r}") from None


def late_command(
    policy: OnLate,
    last_action: tuple[float, ...] | None,
    dim: int | None,
    stamp: tuple[int, int] | None = None,
    failed: bool = False,
) -> LateCommand | None:
    """The command for `policy`, or None when there is nothing sensible to send.

    `hold` needs an earlier action; `zero` needs the action width (`dim`: the number of joints,
    else the width of the last action).
    """
    if policy is OnLate.HOLD:
        return None if last_action is None else LateCommand(policy, last_action, stamp, failed)
    if policy is OnLate.ZERO:
        width = dim if dim else (len(last_action) if last_action else None)
        return None if width is None else LateCommand(policy, (0.0,) * width, stamp, failed)
    return LateCommand(policy, None, stamp, failed)
