"""`vla-bridge` and the `[ros]` extra: the live node runs without rosbags, and a command whose
packages are missing says which, and how to install them, in one line (no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ros_bridge import cli, compat

INSTALL = 'pip install "vla-server[ros]"'

# `vla-bridge run` in a fresh interpreter where rosbags cannot be imported (a None entry in
# sys.modules is what Python reports as not installed), stopped by rclpy.shutdown() as soon as
# its node exists.
RUN_WITHOUT_ROSBAGS = """
import json, sys, threading
sys.modules["rosbags"] = None
from ros_bridge import cli, run
from ros_bridge.compat import rclpy

made = threading.Event()

class Node(run.VlaBridgeNode):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        made.set()

run.VlaBridgeNode = Node
threading.Thread(target=lambda: (made.wait(), rclpy.shutdown()), daemon=True).start()
cli.main(["run", "--start_server", "false", "--transport", "inproc", "--port", "9"])
print(json.dumps({"node_made": made.is_set(), "rosbags": sys.modules["rosbags"] is not None}))
"""


@pytest.mark.skipif(not compat.USING_SHIM, reason="runs the node on the shim's inproc transport")
def test_vla_bridge_run_works_without_rosbags(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_ROSBAGS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "node_made": True,
        "rosbags": False,
    }


def _refusal(monkeypatch: pytest.MonkeyPatch, absent: list[str], main, argv: list[str]) -> str:
    for module in absent:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return str(exc.value.code)


@pytest.mark.parametrize("command", ["replay", "record"])
def test_bag_commands_without_rosbags_name_the_extra(monkeypatch, command):
    argv = [command, "bag", "--image-topics", "/cam", "--server-url", "u", "--report", "r"]
    message = _refusal(monkeypatch, ["rosbags"], cli.main, argv)
    assert (
        message
        == f"vla-bridge {command} needs the [ros] extra (rosbags is not installed): {INSTALL}"
    )


@pytest.mark.skipif(not compat.USING_SHIM, reason="real ROS 2 brings its own DDS")
def test_run_on_dds_without_cyclonedds_names_the_extra(monkeypatch):
    message = _refusal(monkeypatch, ["cyclonedds"], cli.main, ["--start_server", "false"])
    assert message == (
        "vla-bridge run --transport dds needs the [ros] extra (cyclonedds is not installed): "
        + INSTALL
    )


def test_without_yaml_even_help_says_so(monkeypatch):
    message = _refusal(monkeypatch, ["yaml"], cli.main, ["--help"])
    assert message == f"vla-bridge needs the [ros] extra (yaml is not installed): {INSTALL}"


def test_the_bridge_benchmark_without_rosbags_names_the_extra(monkeypatch):
    message = _refusal(monkeypatch, ["rosbags"], cli.main, ["bench"])
    assert (
        message == f"vla-bridge bench needs the [ros] extra (rosbags is not installed): {INSTALL}"
    )
