"""The layout's rules (DESIGN.md §3), checked on the module graph parsed from the source: every
import counts, including those inside functions and under `if TYPE_CHECKING:`. Also the size
limits: no function over 60 lines, no file over 500. And the robot-side bridge's closure: the
bridge and the leaf packages it shares with the server (vla_frames, vla_harness) import nothing
from vla_server, nor torch or transformers, and the server imports nothing from the bridge."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from ros_bridge import cli
from tests.support.import_graph import ROOT, ModuleGraph, build_graph, find_cycles, in_package

PROCESS_PACKAGES = ("vla_server.frontend", "vla_server.scheduler", "vla_server.detokenizer")
LEAF_PACKAGES = ("vla_server.model", "vla_server.mem_cache", "vla_server.multimodal")
SHARED_MODULES = (
    "vla_server.io_struct",
    "vla_server.config",
    "vla_server.errors",
    "vla_server.ipc_dir",
    "vla_server.metrics",
    "vla_server.process_utils",
    "vla_harness.server_subprocess",
)
# What leaves and shared modules sit below: the processes, the launcher and the benchmarks.
ABOVE_THE_LEAVES = (*PROCESS_PACKAGES, "vla_server.entrypoints", "vla_server.bench")
# ROS itself, the shim that stands in for it, and the ROS-side packages of the [ros] extra.
ROS_PACKAGES = (
    "rclpy",
    "rosidl_runtime_py",
    "builtin_interfaces",
    "std_msgs",
    "sensor_msgs",
    "trajectory_msgs",
    "diagnostic_msgs",
    "rcl_interfaces",
    "ros_bridge.compat",
    "ros_bridge.shim",
    "cyclonedds",
    "rosbags",
)
# What the robot computer runs (README, "The bridge on a robot computer (no torch)"): the bridge
# and the two leaf packages it shares with the server.
ROBOT_SIDE = ("ros_bridge", "vla_frames", "vla_harness")
SERVER_SIDE = ("vla_server", "torch", "transformers")
# All that vla_frames and vla_harness may import besides the standard library and themselves
# (matplotlib only inside the plotting function).
LEAF_THIRD_PARTY = ("numpy", "PIL", "xxhash", "httpx", "psutil", "matplotlib")
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 500


@pytest.fixture(scope="module")
def graph() -> ModuleGraph:
    return build_graph()


def _modules(graph: ModuleGraph, package: str) -> list[str]:
    return sorted(m for m in graph.files if in_package(m, package))


def _imports_into(graph: ModuleGraph, packages: list[str], targets: tuple[str, ...]) -> list[str]:
    """'importer -> imported' for each import from `packages` into any of `targets`."""
    return [
        f"{module} -> {dep}"
        for package in packages
        for module in _modules(graph, package)
        for dep in sorted(graph.imports[module])
        if any(in_package(dep, t) for t in targets)
    ]


@pytest.mark.parametrize("package", PROCESS_PACKAGES)
def test_a_process_package_imports_no_other_process_package(graph, package):
    others = tuple(p for p in PROCESS_PACKAGES if p != package)
    assert _imports_into(graph, [package], others) == []


def test_leaf_packages_and_shared_modules_import_nothing_above_them(graph):
    assert _imports_into(graph, [*LEAF_PACKAGES, *SHARED_MODULES], ABOVE_THE_LEAVES) == []


@pytest.mark.parametrize(
    "package", ["vla_server", "ros_bridge", "vla_kernels", "vla_frames", "vla_harness"]
)
def test_no_import_cycles(graph, package):
    cycles = find_cycles(graph, _modules(graph, package))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_kernels_import_nothing_from_the_server_or_the_bridge(graph):
    assert _imports_into(graph, ["vla_kernels"], ("vla_server", "ros_bridge")) == []


def test_the_robot_side_imports_nothing_from_the_server_torch_or_transformers(graph):
    assert _imports_into(graph, list(ROBOT_SIDE), SERVER_SIDE) == []
    # The same, as what importing any robot-side module may run (parent packages included).
    roots = [m for package in ROBOT_SIDE for m in _modules(graph, package)]
    assert _forbidden_reached(graph, roots, SERVER_SIDE) == ""


def test_the_server_imports_nothing_from_the_bridge(graph):
    # `vla_server.bench control` runs `vla-bridge bench` as a subprocess instead.
    assert _imports_into(graph, ["vla_server"], ("ros_bridge",)) == []


def test_the_shared_leaf_packages_import_only_the_stdlib_and_light_packages(graph):
    allowed = (*LEAF_THIRD_PARTY, "vla_frames", "vla_harness", "__future__")
    found = [
        f"{module} -> {dep}"
        for module in _modules(graph, "vla_frames") + _modules(graph, "vla_harness")
        for dep in sorted(graph.imports[module])
        if dep.split(".")[0] not in sys.stdlib_module_names
        and not any(in_package(dep, a) for a in allowed)
    ]
    assert found == []


def _forbidden_reached(graph: ModuleGraph, roots: list[str], forbidden: tuple[str, ...]) -> str:
    """One import chain per forbidden module reached from `roots`, one per line."""
    reached = sorted(m for m in graph.closure(roots) if any(in_package(m, f) for f in forbidden))
    chains = []
    for module in reached:
        root = next(r for r in roots if graph.path(r, module))
        chains.append(" -> ".join(graph.path(root, module)))
    return "\n".join(chains)


GENERIC_PACKAGES = (
    *LEAF_PACKAGES,
    *PROCESS_PACKAGES,
    "vla_server.entrypoints",
    "vla_server.io_struct",
    "vla_server.config",
)
# A family's own names: they belong in its folder under vla_server/policies/.
FAMILY_WORDS = re.compile(r"openvla|prismatic|paligemma|pi0|pi05|smolvla", re.IGNORECASE)


@pytest.mark.parametrize("package", GENERIC_PACKAGES)
def test_generic_packages_import_no_policy_family(graph, package):
    """Only the family-neutral part of `policies` (base, registry) is theirs to import."""
    neutral = ("vla_server.policies.base", "vla_server.policies.registry", "vla_server.policies")
    bad = [
        f"{m} -> {t}"
        for m in _modules(graph, package)
        for t in graph.imports.get(m, ())
        if in_package(t, "vla_server.policies") and t not in neutral
    ]
    assert not bad, bad


@pytest.mark.parametrize("package", (*GENERIC_PACKAGES, "vla_server.bench"))
def test_no_family_is_named_outside_its_folder(package):
    root = ROOT / package.replace(".", "/")
    files = [root.with_suffix(".py")] if root.with_suffix(".py").is_file() else root.rglob("*.py")
    named = [
        f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if FAMILY_WORDS.search(line)
    ]
    assert not named, named


def test_the_live_bridge_node_never_imports_rosbags(graph):
    # `vla-bridge run`: the CLI, the module it dispatches `run` to, the node, and whichever shim
    # modules ros_bridge.compat loads by name.
    roots = ["ros_bridge.cli", cli.COMMANDS["run"].module, "ros_bridge.bridge_node"]
    roots += _modules(graph, "ros_bridge.shim")
    assert _forbidden_reached(graph, roots, ("rosbags",)) == ""


def _says_ros_free(file: Path) -> bool:
    doc = ast.get_docstring(ast.parse(file.read_text())) or ""
    return "ROS-free" in doc.split("\n\n")[0]


def test_modules_that_say_they_are_ros_free_import_no_ros(graph):
    ros_free = sorted(m for m, file in graph.files.items() if _says_ros_free(file))
    assert "ros_bridge.bridge_worker" in ros_free  # the docstring convention is still in use
    found = {m: _forbidden_reached(graph, [m], ROS_PACKAGES) for m in ros_free}
    assert {m: chains for m, chains in found.items() if chains} == {}


def _source_files() -> list[Path]:
    return sorted(
        f
        for folder in ("vla_server", "ros_bridge", "vla_frames", "vla_harness")
        for f in (ROOT / folder).rglob("*.py")
    )


def test_no_function_is_over_60_lines():
    long = []
    for file in _source_files():
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{file.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_no_file_is_over_500_lines():
    sizes = {f.relative_to(ROOT): len(f.read_text().splitlines()) for f in _source_files()}
    assert {f: n for f, n in sizes.items() if n > MAX_FILE_LINES} == {}


def test_the_checker_sees_every_kind_of_import_and_every_cycle(tmp_path):
    """The rules above are only as good as the graph: a failing rule must be possible."""
    sources = {
        "__init__.py": "",
        "d.py": "",
        "sub/__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n",
        "b.py": "def f():\n    import vla_server.sub.c\n",
        "sub/c.py": "from ..a import thing\nfrom vla_server import d\nimport rosbags.x\n",
    }
    (tmp_path / "vla_server/sub").mkdir(parents=True)
    for name, text in sources.items():
        (tmp_path / "vla_server" / name).write_text(text)
    g = build_graph(tmp_path)
    assert g.imports["vla_server.a"] == {"typing", "vla_server.b"}
    assert g.imports["vla_server.sub.c"] == {"vla_server.a", "vla_server.d", "rosbags.x"}
    cycle = "vla_server.a -> vla_server.b -> vla_server.sub.c -> vla_server.a"
    assert find_cycles(g, g.files) == [cycle]
    # Importing d runs vla_server/__init__.py; importing b reaches rosbags through sub/__init__.
    assert g.closure(["vla_server.d"]) == {"vla_server.d", "vla_server"}
    assert g.path("vla_server.b", "rosbags.x") == ["vla_server.b", "vla_server.sub.c", "rosbags.x"]
