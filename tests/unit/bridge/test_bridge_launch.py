"""The launch file, loaded with a stand-in for the launch API: what it would start.

Also: `vla-bridge run` takes the same arguments with the same defaults, and the ament package
installs the launch file where `ros2 launch vla_bridge vla_bridge.launch.py` looks for it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ros_bridge import cli
from ros_bridge.bridge_params import LAUNCH_PARAMS, PARAMS_BY_NAME
from vla_harness.server_subprocess import serve_command

REPO = Path(__file__).resolve().parents[3]
LAUNCH_FILE = REPO / "launch" / "vla_bridge.launch.py"
AMENT = REPO / "ament" / "vla_bridge"


class Recorded:
    """Any launch action: keeps its arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs


class LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context: Context) -> str:
        return context.launch_configurations[self.name]


@dataclass
class Context:
    launch_configurations: dict[str, str] = field(default_factory=dict)


def stand_in_modules() -> dict[str, types.ModuleType]:
    names = {
        "launch": ["LaunchDescription"],
        "launch.actions": [
            "DeclareLaunchArgument",
            "ExecuteProcess",
            "OpaqueFunction",
            "RegisterEventHandler",
            "Shutdown",
        ],
        "launch.event_handlers": ["OnProcessExit"],
        "launch.substitutions": [],
        "launch_ros": [],
        "launch_ros.actions": ["Node"],
    }
    modules = {}
    for module_name, classes in names.items():
        module = types.ModuleType(module_name)
        for cls in classes:
            setattr(module, cls, type(cls, (Recorded,), {}))
        modules[module_name] = module
    modules["launch.substitutions"].LaunchConfiguration = LaunchConfiguration
    return modules


@pytest.fixture
def launch_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    for name, module in stand_in_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("vla_bridge_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def declared(description: Recorded) -> dict[str, Recorded]:
    (entities,) = description.args
    return {e.args[0]: e for e in entities if type(e).__name__ == "DeclareLaunchArgument"}


def perform(module: types.ModuleType, **overrides: str) -> list[Recorded]:
    description = module.generate_launch_description()
    values = {name: arg.kwargs["default_value"] for name, arg in declared(description).items()}
    (opaque,) = [e for e in description.args[0] if type(e).__name__ == "OpaqueFunction"]
    return opaque.kwargs["function"](Context({**values, **overrides}))


def by_type(actions: list[Recorded], name: str) -> list[Recorded]:
    return [a for a in actions if type(a).__name__ == name]


def test_arguments_match_vla_bridge_run(launch_module: types.ModuleType) -> None:
    arguments = declared(launch_module.generate_launch_description())
    assert {n: a.kwargs["default_value"] for n, a in arguments.items()} == cli.run_args_defaults()
    run = cli.build_parser()._subparsers._group_actions[0].choices["run"]  # noqa: SLF001
    flags = {a.dest for a in run._actions if a.dest not in ("help", "transport")}  # noqa: SLF001
    assert flags == set(arguments)
    assert all(a.kwargs["description"] for a in arguments.values())
    assert arguments["on_late"].kwargs["choices"] == ["hold", "zero", "stop"]


def test_default_launch_starts_the_demo_server_and_the_node(launch_module) -> None:
    actions = perform(launch_module)
    (server,) = by_type(actions, "ExecuteProcess")
    assert server.kwargs["cmd"] == serve_command("", "127.0.0.1", 30000)
    assert server.kwargs["cmd"][1:5] == ["-m", "vla_server.entrypoints.cli", "serve", "--host"]
    (node,) = by_type(actions, "Node")
    assert node.kwargs["package"] == "vla_bridge" and node.kwargs["executable"] == "bridge_node"
    assert node.kwargs["remappings"] == [("image", "/camera/image_raw")]
    (params,) = node.kwargs["parameters"]
    assert params["server_url"] == "http://127.0.0.1:30000"
    assert params["deadline_ms"] == 500.0 and isinstance(params["deadline_ms"], float)
    assert params["image_topics"] == ["image"] and params["compressed"] is False
    assert params["num_actions"] == 1 and params["instruction"] == "pick up the cube"
    assert "joint_names" not in params  # an empty list cannot be written as a ROS parameter
    (handler,) = by_type(actions, "RegisterEventHandler")
    (on_exit,) = handler.args
    assert on_exit.kwargs["target_action"] is server
    assert type(on_exit.kwargs["on_exit"][0]).__name__ == "Shutdown"


def test_arguments_reach_the_server_and_node(launch_module) -> None:
    actions = perform(
        launch_module,
        model="/ckpt",
        port="30123",
        camera="/cam/compressed",
        compressed="true",
        deadline_ms="80",
        joint_names="[j1, j2]",
        on_late="zero",
        instruction="123",
    )
    (server,) = by_type(actions, "ExecuteProcess")
    assert server.kwargs["cmd"] == serve_command("/ckpt", "127.0.0.1", 30123)
    (node,) = by_type(actions, "Node")
    (params,) = node.kwargs["parameters"]
    assert params["compressed"] is True and params["deadline_ms"] == 80.0
    assert params["joint_names"] == ["j1", "j2"] and params["on_late"] == "zero"
    assert params["instruction"] == "123"  # text stays text
    assert params["server_url"] == "http://127.0.0.1:30123"
    assert node.kwargs["remappings"] == [("image", "/cam/compressed")]
    # vla-bridge run parses the same settings to the same values
    ns = cli.build_parser().parse_args(
        [
            "run",
            "--compressed",
            "true",
            "--deadline-ms",
            "80",
            "--joint_names",
            "j1",
            "j2",
            "--on_late",
            "zero",
            "--instruction",
            "123",
        ]
    )
    for name in ("compressed", "deadline_ms", "joint_names", "on_late", "instruction"):
        assert getattr(ns, name) == params[name]


def test_without_start_server_only_the_node_runs(launch_module) -> None:
    actions = perform(launch_module, start_server="false")
    assert [type(a).__name__ for a in actions] == ["Node"]


def test_bad_argument_types_are_refused(launch_module) -> None:
    with pytest.raises(ValueError, match="deadline_ms"):
        perform(launch_module, deadline_ms="soon")


def test_every_bridge_parameter_but_server_url_is_a_launch_argument() -> None:
    assert {p.name for p in LAUNCH_PARAMS} == set(PARAMS_BY_NAME) - {"server_url"}


def test_ament_package_is_what_colcon_needs() -> None:
    root = ET.parse(AMENT / "package.xml").getroot()
    assert root.get("format") == "3" and root.findtext("name") == "vla_bridge"
    assert root.find("export/build_type").text == "ament_python"
    depends = {e.text for e in root.findall("exec_depend")}
    assert {"rclpy", "sensor_msgs", "trajectory_msgs", "diagnostic_msgs", "launch_ros"} <= depends
    assert (AMENT / "resource" / "vla_bridge").is_file()
    assert "install_scripts=$base/lib/vla_bridge" in (AMENT / "setup.cfg").read_text()
    # colcon stops descending at an identified package: the repository root must not be one.
    assert not any((REPO / f).exists() for f in ("package.xml", "setup.py", "setup.cfg"))


def test_ament_install_puts_launch_file_and_executables_where_ros2_looks(tmp_path: Path) -> None:
    build, prefix = tmp_path / "build", tmp_path / "install"
    build.mkdir()
    subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "egg_info",
            "--egg-base",
            str(build),
            "build",
            "--build-base",
            str(build),
            "install",
            "--prefix",
            str(prefix),
            "--single-version-externally-managed",
            "--record",
            str(tmp_path / "record.txt"),
        ],
        cwd=AMENT,
        check=True,
        capture_output=True,
    )
    share = prefix / "share"
    assert (share / "ament_index/resource_index/packages/vla_bridge").is_file()
    assert (share / "vla_bridge/package.xml").is_file()
    installed = share / "vla_bridge/launch/vla_bridge.launch.py"
    assert installed.read_text() == LAUNCH_FILE.read_text()
    for script in ("bridge_node", "vla_bridge"):
        assert (prefix / "lib/vla_bridge" / script).is_file()
    assert not list(AMENT.glob("*.egg-info"))  # the source tree stays clean
