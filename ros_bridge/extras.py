"""What the `[ros]` extra adds, and the one-line refusal when a command needs it but it is absent.

`pip install vla-server` serves without DDS or rosbag2 packages; the bridge's commands check for
the modules they will import before importing anything, so a missing extra reads as an
instruction rather than a traceback.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable


def install_command(extra: str = "ros") -> str:
    return f'pip install "vla-server[{extra}]"'


INSTALL = install_command()
# Import names of the extra's packages, by what needs them.
DDS = "cyclonedds"  # the shim's ROS 2 wire transport
ROSBAGS = "rosbags"  # rosbag2 reading and writing
YAML = "yaml"  # parameter files, launch-argument values
GYM_ALOHA = "gym_aloha"  # the simulated ALOHA arms (`vla-bridge sim`; the [sim] extra)


def missing(modules: Iterable[str]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(command: str, modules: Iterable[str], extra: str = "ros") -> None:
    """Exit with one line naming the extra when any of `modules` cannot be imported."""
    absent = missing(modules)
    if absent:
        raise SystemExit(
            f"{command} needs the [{extra}] extra ({', '.join(absent)} is not installed): "
            f"{install_command(extra)}"
        )
