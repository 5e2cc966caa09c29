"""The bridge's entry points always stop on SIGINT.

A shell without job control starts background commands with SIGINT ignored, and Python then
installs no handler: the bridge would outlive the SIGINT that ^C and ROS 2 launch's shutdown
send."""

from __future__ import annotations

import signal


def stop_on_sigint() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
