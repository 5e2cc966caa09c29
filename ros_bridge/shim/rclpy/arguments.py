"""The `--ros-args` command line: remaps (`-r`), parameters (`-p`, `--params-file`).

The same syntax `ros2 run` and launch_ros pass, so `vla-bridge` can forward its arguments
unchanged: `--ros-args -r image:=/camera/image_raw -p deadline_ms:=150 --params-file f.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass(frozen=True)
class Remap:
    """`[node:]source:=target`; `source` `__node` / `__ns` rename the node / set its namespace."""

    node: str | None
    source: str
    target: str


@dataclass(frozen=True)
class ParamRule:
    node: str | None  # None: every node; else a node name or fully qualified name
    name: str
    value: Any


@dataclass
class RosArguments:
    remaps: list[Remap] = field(default_factory=list)
    params: list[ParamRule] = field(default_factory=list)

    def extend(self, other: RosArguments) -> None:
        self.remaps.extend(other.remaps)
        self.params.extend(other.params)

    def node_remaps(self, node_name: str) -> list[Remap]:
        return [r for r in self.remaps if r.node in (None, node_name)]

    def node_params(self, node_name: str, fq_name: str) -> dict[str, Any]:
        matching = (None, "/**", node_name, fq_name, fq_name.lstrip("/"))
        return {rule.name: rule.value for rule in self.params if rule.node in matching}


def parse_ros_args(args: list[str] | None) -> RosArguments:
    """The ROS arguments in `args`: everything after each `--ros-args` up to a lone `--`."""
    parsed = RosArguments()
    tokens = iter(_split_ros_args(args or [])[0])
    for token in tokens:
        if token in ("-r", "--remap"):
            parsed.remaps.append(_parse_remap(next(tokens, "")))
        elif token in ("-p", "--param"):
            parsed.params.append(_parse_param(next(tokens, "")))
        elif token == "--params-file":
            parsed.params.extend(load_params_file(next(tokens, "")))
        else:
            raise ValueError(f"unsupported ROS argument {token!r}")
    return parsed


def remove_ros_args(args: list[str]) -> list[str]:
    """`args` without the `--ros-args ... [--]` sections (rclpy.utilities.remove_ros_args)."""
    return _split_ros_args(args)[1]


def _split_ros_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(the tokens inside `--ros-args ... [--]` sections, all the others)."""
    ros: list[str] = []
    kept: list[str] = []
    in_ros = False
    for token in args:
        if token == "--ros-args":
            in_ros = True
        elif in_ros and token == "--":
            in_ros = False
        else:
            (ros if in_ros else kept).append(token)
    return ros, kept


def _split_rule(rule: str) -> tuple[str | None, str, str]:
    lhs, sep, rhs = rule.partition(":=")
    if not sep or not lhs:
        raise ValueError(f"malformed rule {rule!r}, expected [node:]name:=value")
    node, colon, name = lhs.rpartition(":")
    return (node if colon else None), name, rhs


def _parse_remap(rule: str) -> Remap:
    node, source, target = _split_rule(rule)
    return Remap(node, source, target)


def _parse_param(rule: str) -> ParamRule:
    node, name, text = _split_rule(rule)
    return ParamRule(node, name, parse_param_value(text))


def parse_param_value(text: str) -> Any:
    """A command-line parameter value read as YAML, as rcl does (`10` int, `[a, b]` list)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return _plain(value, text)


def _plain(value: Any, text: str) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and all(isinstance(v, bool | int | float | str) for v in value):
        return value
    return text


def load_params_file(path: str) -> list[ParamRule]:
    """Rules from a `ros2 param dump` style YAML file: `<node>: {ros__parameters: {...}}`."""
    with open(path, encoding="utf-8") as handle:
        document = yaml.safe_load(handle) or {}
    rules: list[ParamRule] = []
    # Wildcard sections first, so that a node's own section overrides them (as in rclpy).
    for node, body in sorted(document.items(), key=lambda item: item[0] != "/**"):
        if not isinstance(body, dict) or "ros__parameters" not in body:
            raise ValueError(f"{path}: node {node!r} has no 'ros__parameters' section")
        for name, value in _flatten(body["ros__parameters"]).items():
            rules.append(ParamRule(node, name, _plain(value, str(value))))
    return rules


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
