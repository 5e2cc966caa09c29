"""The flow demo: the tiny pi0 (`tiny.py`, LeRobot's layout) for gym-aloha's two arms, served
like the ALOHA demo (`vla-bridge sim` drives the arms with it): the `top` camera, the 14 joint
positions as its state and 14 joint targets as its actions, both normalised with statistics
over the arms' joint ranges (`demo_robots.py`, mean-std at a sixth of the range), pi0's real
chunk of 50 and the flow matrices at real-time chunking's spread.

`python -m vla_server.policies.pi0.demo aloha` builds it once and prints the folder.
"""

from __future__ import annotations

from pathlib import Path

from vla_server.model.checkpoint_cache import cached_folder
from vla_server.policies.demo_robots import ALOHA_CAMERA, aloha_stats
from vla_server.policies.pi0.tiny import RTC_CHUNK, RTC_FLOW_SPREAD, build_pi0
from vla_server.policies.pi_common.tiny_paligemma import TinyRobot

ALOHA_FLOW_DEMO_NAME = "demo-pi0-aloha-v1"
ALOHA_ROBOT = TinyRobot((ALOHA_CAMERA,), aloha_stats(), aloha_stats())


def build_aloha_flow_demo(out: Path) -> None:
    build_pi0(out, "pi0", "bare", chunk=RTC_CHUNK, spread=RTC_FLOW_SPREAD, robot=ALOHA_ROBOT)


def aloha_flow_demo_path(cache_dir: Path | None = None) -> Path:
    return cached_folder(ALOHA_FLOW_DEMO_NAME, build_aloha_flow_demo, cache_dir)


def main(argv: list[str] | None = None) -> None:
    """`python -m vla_server.policies.pi0.demo aloha`: builds (once) and prints the folder."""
    import argparse
    import contextlib
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("variant", choices=("aloha",))
    parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # the build's progress; stdout is the path
        path = aloha_flow_demo_path()
    print(path)


if __name__ == "__main__":
    main()
