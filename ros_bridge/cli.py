"""`vla-bridge`: the bridge off ROS (run), and bag tools (replay, record).

`vla-bridge [run] [--model M] [--port P] [--camera TOPIC] [--<parameter> VALUE ...]` starts
`vla-server serve` and VlaBridgeNode on the shim, with the same arguments (and defaults) as
`ros2 launch vla_bridge vla_bridge.launch.py name:=value ...`: both come from bridge_params.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ros_bridge import compat
from ros_bridge.bridge_params import LAUNCH_PARAMS, SERVER_ARGS, ParamSpec, launch_default

SUBCOMMANDS = ("run", "replay", "record")


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
    defaults = {arg.name: arg.default for arg in SERVER_ARGS}
    defaults.update({spec.name: launch_default(spec) for spec in LAUNCH_PARAMS})
    return defaults


def cmd_run(ns: argparse.Namespace) -> None:
    from ros_bridge.bridge_node import VlaBridgeNode
    from ros_bridge.compat import rclpy
    from vla_server.server_subprocess import start_server

    server = start_server(ns.model, ns.host, int(ns.port)) if ns.start_server else None
    try:
        if server is not None:
            server.wait_healthy()
        init_kw = {"transport": ns.transport} if compat.USING_SHIM else {}
        rclpy.init(args=["--ros-args", "-r", f"image:={ns.camera}"], **init_kw)
        values = {spec.name: getattr(ns, spec.name) for spec in LAUNCH_PARAMS}
        values["server_url"] = f"http://{ns.host}:{ns.port}"
        overrides = [rclpy.parameter.Parameter(k, value=v) for k, v in values.items() if v != []]
        node = VlaBridgeNode(parameter_overrides=overrides)
        try:
            executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
            executor.add_node(node)
            executor.spin()
        except KeyboardInterrupt:
            pass
        finally:
            node.destroy_node()
            rclpy.try_shutdown()
    finally:
        if server is not None:
            server.stop()


def _param_pair(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition(":=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:=VALUE, got {text!r}")
    return name, yaml.safe_load(value)


def add_replay_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="rosbag2 folder (mcap or sqlite3)")
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--report", type=Path, required=True, help="JSON report to write")
    parser.add_argument("--image-topics", nargs="+", default=None, help="default: all cameras")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    parser.add_argument("--instruction", default=None)
    parser.add_argument("--plot", type=Path, default=None, help="also write this PNG")
    parser.add_argument(
        "--param",
        type=_param_pair,
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        help="another node parameter",
    )


def cmd_replay(ns: argparse.Namespace) -> None:
    from ros_bridge.replay import ReplayConfig, run_replay, write_report

    config = ReplayConfig(
        ns.bag, ns.server_url, ns.image_topics, ns.rate, ns.instruction, dict(ns.param)
    )
    report = run_replay(config)
    write_report(report, ns.report)
    if ns.plot is not None:
        from ros_bridge.replay_plot import plot_report

        plot_report(report, ns.plot)
    summary = {k: report[k] for k in ("frames_in", "frames_processed", "deadline_misses")}
    summary["frame_to_action"] = report["frame_to_action"]
    print(json.dumps(summary))


def add_record_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", type=Path, help="new rosbag2 folder to write")
    parser.add_argument("--image-topics", nargs="+", required=True)
    parser.add_argument("--compressed", action="store_true", help="CompressedImage topics")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--duration", type=float, default=None, help="seconds (default: ^C)")
    parser.add_argument("--frames", type=int, default=None, help="stop after this many")
    parser.add_argument("--transport", choices=("dds", "inproc"), default="dds")


def cmd_record(ns: argparse.Namespace) -> None:
    from ros_bridge.compat import rclpy
    from ros_bridge.record import record_topics

    rclpy.init(args=[], **({"transport": ns.transport} if compat.USING_SHIM else {}))
    try:
        n = record_topics(
            ns.bag,
            ns.image_topics,
            compressed=ns.compressed,
            storage=ns.storage,
            duration_s=ns.duration,
            max_frames=ns.frames,
        )
    except KeyboardInterrupt:
        n = -1
    finally:
        rclpy.try_shutdown()
    print(f"recorded {n if n >= 0 else 'some'} frames to {ns.bag}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vla-bridge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add, func in (
        ("run", add_run_args, cmd_run),
        ("replay", add_replay_args, cmd_replay),
        ("record", add_record_args, cmd_record),
    ):
        sub_parser = sub.add_parser(name)
        add(sub_parser)
        sub_parser.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*SUBCOMMANDS, "-h", "--help"):
        argv.insert(0, "run")  # `vla-bridge --port 30001` means `vla-bridge run --port 30001`
    ns = build_parser().parse_args(argv)
    ns.func(ns)


if __name__ == "__main__":
    main()
