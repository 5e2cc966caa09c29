"""`vla-bridge`: the bridge off ROS (run), bag tools (replay, record), a simulated robot
(sim), the bridge's overhead benchmark (bench), and the ROS 2 graph without ROS 2 (`node list`,
`param get|set|list`).

`vla-bridge [run] [--model M] [--port P] [--camera TOPIC] [--<parameter> VALUE ...]` starts
`vla-server serve` and VlaBridgeNode on the shim, with the same arguments (and defaults) as
`ros2 launch vla_bridge vla_bridge.launch.py name:=value ...`: both come from bridge_params.

Only the chosen command's module is imported, after checking that what it needs from the
`[ros]` extra is installed: `run` never imports the bag tools (rosbags).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ros_bridge import extras, graph_args
from ros_bridge.signals import stop_on_sigint

if TYPE_CHECKING:
    from ros_bridge.bridge_params import ParamSpec


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _add_param_flag(parser: argparse.ArgumentParser, spec: ParamSpec) -> None:
    flags = [f"--{spec.name}"] + ([f"--{spec.name.replace('_', '-')}"] if "_" in spec.name else [])
    kw: dict[str, Any] = {"dest": spec.name, "default": spec.default, "help": spec.description}
    if spec.kind is bool:
        kw["type"] = parse_bool
    elif spec.kind is list:
        kw["nargs"] = "*"
    else:
        kw["type"] = spec.kind
    if spec.choices:
        kw["choices"] = spec.choices
    parser.add_argument(*flags, **kw)


def add_run_args(parser: argparse.ArgumentParser) -> None:
    from ros_bridge.bridge_params import LAUNCH_PARAMS, SERVER_ARGS

    for arg in SERVER_ARGS:
        flags = [f"--{arg.name}"] + ([f"--{arg.name.replace('_', '-')}"] if "_" in arg.name else [])
        kind = parse_bool if arg.default in ("true", "false") else str
        parser.add_argument(
            *flags, dest=arg.name, type=kind, default=kind(arg.default), help=arg.description
        )
    for spec in LAUNCH_PARAMS:
        _add_param_flag(parser, spec)
    parser.add_argument(
        "--transport",
        choices=("dds", "inproc"),
        default="dds",
        help="shim transport (ignored under real ROS 2)",
    )


def run_args_defaults() -> dict[str, str]:
    """The run flags' defaults as launch-argument text (for the launch-file parity test)."""
    from ros_bridge.bridge_params import LAUNCH_PARAMS, SERVER_ARGS, launch_default

    defaults = {arg.name: arg.default for arg in SERVER_ARGS}
    defaults.update({spec.name: launch_default(spec) for spec in LAUNCH_PARAMS})
    return defaults


def _param_pair(text: str) -> tuple[str, Any]:
    import yaml

    name, sep, value = text.partition(":=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:=VALUE, got {text!r}")
    return name, yaml.safe_load(value)


def add_param_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(
        "--param",
        type=_param_pair,
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        help=help_text,
    )


def add_replay_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="rosbag2 folder (mcap or sqlite3)")
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--report", type=Path, required=True, help="JSON report to write")
    parser.add_argument("--image-topics", nargs="+", default=None, help="default: all cameras")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    parser.add_argument("--instruction", default=None)
    add_unnorm_key_option(parser)
    parser.add_argument("--plot", type=Path, default=None, help="also write this PNG")
    add_param_option(parser, "another node parameter")


def add_unnorm_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--unnorm-key",
        "--unnorm_key",
        dest="unnorm_key",
        default=None,
        help="action statistics key",
    )


def add_record_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="new rosbag2 folder to write")
    parser.add_argument("--image-topics", nargs="+", required=True)
    parser.add_argument("--compressed", action="store_true", help="CompressedImage topics")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--duration", type=float, default=None, help="seconds (default: ^C)")
    parser.add_argument("--frames", type=int, default=None, help="stop after this many")
    parser.add_argument("--transport", choices=("dds", "inproc"), default="dds")


def add_sim_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--report", type=Path, required=True, help="JSON report to write")
    parser.add_argument("--env", default="gym_aloha/AlohaInsertion-v0", help="gym-aloha task")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=50.0, help="control rate (Hz)")
    parser.add_argument("--camera-rate", type=float, default=10.0, help="frames per second")
    parser.add_argument("--cameras", default="top", help="comma-separated ALOHA camera names")
    parser.add_argument("--camera-size", default="640x480", help="WIDTHxHEIGHT")
    parser.add_argument("--instruction", default=None)
    parser.add_argument("--seed", type=int, default=0, help="the task's reset seed")
    add_unnorm_key_option(parser)
    parser.add_argument(
        "--full-render", action="store_true", help="shadows and anti-aliasing (~7x the CPU)"
    )
    parser.add_argument(
        "--command-timeout", type=float, default=1.0, help="seconds a step waits for its command"
    )
    parser.add_argument("--record", type=Path, default=None, help="rosbag2 (mcap) to write")
    parser.add_argument("--plot", type=Path, default=None, help="also write this PNG")
    add_param_option(parser, "a bridge parameter (e.g. executor:=interpolate)")


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server-url", default=None, help="default: start the demo model")
    parser.add_argument(
        "--bag",
        type=Path,
        default=None,
        help="camera recording (rosbag2, mcap, sqlite3); default: a source checkout's tests/data",
    )
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--unnorm-key", default=None, help="default: the demo model's ALOHA key")
    parser.add_argument("--num-actions", type=int, default=None, help="default: 2")
    parser.add_argument("--out", type=Path, default=Path("bench_out/bridge"))


@dataclass(frozen=True)
class Command:
    module: str  # holds `command(ns)`, imported only when this command runs
    add_args: Callable[[argparse.ArgumentParser], None]
    needs: tuple[str, ...]  # import names from the [ros] extra


COMMANDS = {
    "run": Command("ros_bridge.run", add_run_args, (extras.YAML,)),
    "replay": Command("ros_bridge.replay", add_replay_args, (extras.YAML, extras.ROSBAGS)),
    "record": Command("ros_bridge.record", add_record_args, (extras.YAML, extras.ROSBAGS)),
    "sim": Command("ros_bridge.sim.sim_command", add_sim_args, (extras.YAML, extras.ROSBAGS)),
    "node": Command("ros_bridge.graph_cli", graph_args.add_node_args, (extras.YAML,)),
    "param": Command("ros_bridge.graph_cli", graph_args.add_param_args, (extras.YAML,)),
    "bench": Command("ros_bridge.bench_bridge", add_bench_args, (extras.YAML, extras.ROSBAGS)),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vla-bridge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.add_args(sub.add_parser(name))
    return parser


def main(argv: list[str] | None = None) -> None:
    stop_on_sigint()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv.insert(0, "run")  # `vla-bridge --port 30001` means `vla-bridge run --port 30001`
    # Before the parser is built: the run flags' defaults need yaml.
    if argv[0] in COMMANDS:
        extras.require(f"vla-bridge {argv[0]}", COMMANDS[argv[0]].needs)
    else:
        extras.require("vla-bridge", (extras.YAML,))
    ns = build_parser().parse_args(argv)
    importlib.import_module(COMMANDS[ns.command].module).command(ns)


if __name__ == "__main__":
    main()
