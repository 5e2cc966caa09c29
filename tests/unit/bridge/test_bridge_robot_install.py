"""The bridge on a robot computer (README, "The bridge on a robot computer (no torch)").

In a fresh interpreter the bridge's modules load without putting `vla_server`, torch or
transformers in `sys.modules`, and `vla-bridge run` starts its node with all three made
unimportable. The README's `pip install` line names a package for every third-party module the
bridge and its leaf packages import. (The static rule, every import statement, is in
test_import_rules.py.)
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ros_bridge import compat
from tests.support.import_graph import ROOT

SERVER_SIDE = ("vla_server", "torch", "transformers")

LOAD_THE_BRIDGE = f"""
import json, pkgutil, sys
import ros_bridge.cli, ros_bridge.run, ros_bridge.replay, ros_bridge.record, ros_bridge.shim
for info in pkgutil.walk_packages(ros_bridge.shim.__path__, "ros_bridge.shim."):
    __import__(info.name)
shim = sorted(m for m in sys.modules if m.startswith("ros_bridge.shim."))
server_side = sorted(m for m in sys.modules if m.split(".")[0] in {SERVER_SIDE!r})
print(json.dumps({{"server_side": server_side, "shim_modules": len(shim)}}))
"""

# `vla-bridge run` on the shim's in-process transport, the server side unimportable (a None entry
# in sys.modules reads as not installed), stopped by rclpy.shutdown() once its node exists.
RUN_WITHOUT_THE_SERVER_SIDE = f"""
import json, sys, threading
for name in {SERVER_SIDE!r}:
    sys.modules[name] = None
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
print(json.dumps({{"node_made": made.is_set()}}))
"""

# Import name -> the package the README's line installs for it.
PIP_NAMES = {
    "numpy": "numpy",
    "PIL": "pillow",
    "xxhash": "xxhash",
    "httpx": "httpx",
    "psutil": "psutil",
    "yaml": "pyyaml",
    "cyclonedds": "cyclonedds",
    "rosbags": "rosbags",
}
# Imported by the bridge but not from that line: the plots' optional matplotlib (the README names
# it beside the line), ROS 2's own rosidl_runtime_py (real ROS only), and what `vla-bridge sim`
# needs from the [sim] extra.
NOT_ON_THE_LINE = {"matplotlib", "rosidl_runtime_py", "gym_aloha", "gymnasium"}
OWN_PACKAGES = {"ros_bridge", "vla_frames", "vla_harness"}


def _run(code: str, cwd: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_bridge_loads_without_the_server_torch_or_transformers(tmp_path):
    loaded = _run(LOAD_THE_BRIDGE, tmp_path)
    assert loaded["server_side"] == []
    assert loaded["shim_modules"] > 20  # the walk did import the shim's modules


@pytest.mark.skipif(not compat.USING_SHIM, reason="runs the node on the shim's inproc transport")
def test_vla_bridge_run_starts_its_node_with_the_server_side_unimportable(tmp_path):
    assert _run(RUN_WITHOUT_THE_SERVER_SIDE, tmp_path) == {"node_made": True}


def _third_party_imports() -> set[str]:
    names = set()
    for folder in sorted(OWN_PACKAGES):
        for file in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text())):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - OWN_PACKAGES - {"__future__"}


def _readme_install_line() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### The bridge on a robot computer (no torch)\n", 1)[1]
    section = section.split("\n#", 1)[0]
    (line,) = [ln for ln in section.splitlines() if ln.startswith("pip install numpy")]
    return [re.sub(r"[\"']|==.*", "", word) for word in line.split()[2:]]


def test_the_readme_install_line_covers_every_package_the_bridge_imports():
    imported = _third_party_imports()
    assert imported - NOT_ON_THE_LINE <= PIP_NAMES.keys(), "name the new package in the README"
    assert sorted(_readme_install_line()) == sorted(
        PIP_NAMES[m] for m in imported - NOT_ON_THE_LINE
    )
