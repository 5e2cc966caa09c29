"""`vla-bridge node list` and `vla-bridge param get|set|list`: `ros2 node` and `ros2 param` for a
machine without ROS 2.

They speak what the ROS 2 tools speak, the graph (`ros_discovery_info`) and a node's parameter
services, so they work against the bridge and against any ROS 2 node in the domain
(`ROS_DOMAIN_ID`), over the shim's DDS transport, or over real rclpy where ROS 2 is sourced.
Output follows the ROS 2 tools: `param get` prints e.g. `Double value is: 80.0`, `param set`
prints `Set parameter successful` (else the node's reason, and exits 1). Unlike `ros2 param set`,
an integer given for a double parameter is sent as a double.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import yaml

from ros_bridge import compat, extras
from ros_bridge.compat import rcl_interfaces, rclpy

_TYPE_WORDS = {  # rcl_interfaces/msg/ParameterType -> how `ros2 param get` names it
    1: ("Boolean value is", False),
    2: ("Integer value is", False),
    3: ("Double value is", False),
    4: ("String value is", False),
    5: ("Byte values are", True),
    6: ("Boolean values are", True),
    7: ("Integer values are", True),
    8: ("Double values are", True),
    9: ("String values are", True),
}
_DOUBLE, _STRING, _DOUBLE_ARRAY = 3, 4, 8


def command(ns: argparse.Namespace) -> None:
    if compat.USING_SHIM:
        extras.require(f"vla-bridge {ns.command}", (extras.DDS,))
    rclpy.init(args=[], **({"transport": "dds"} if compat.USING_SHIM else {}))
    node = rclpy.node.Node(f"_vla_bridge_cli_{os.getpid()}", start_parameter_services=False)
    try:
        verbs: dict[str, Callable[[Any, argparse.Namespace], None]] = {
            "node list": _node_list,
            "param get": _param_get,
            "param set": _param_set,
            "param list": _param_list,
        }
        verbs[f"{ns.command} {ns.verb}"](node, ns)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _node_list(node: Any, ns: argparse.Namespace) -> None:
    time.sleep(ns.timeout)  # discovery: let the graph fill in, as `ros2 node list` spins
    found = node.get_node_names_and_namespaces()
    for namespace, name in sorted({(ns_, name) for name, ns_ in found}):
        if ns.all or not name.startswith("_"):
            print(f"{namespace.rstrip('/')}/{name}")


def _call(node: Any, srv_type: Any, ns: argparse.Namespace, service: str, request: Any) -> Any:
    target = ns.node if ns.node.startswith("/") else f"/{ns.node}"
    client = node.create_client(srv_type, f"{target}/{service}")
    if not client.wait_for_service(timeout_sec=ns.timeout):
        raise SystemExit(f"Node not found: {target} (no {service} service)")
    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=ns.timeout)
    if not future.done():
        raise SystemExit(f"{target}/{service} did not answer within {ns.timeout} s")
    return future.result()


def _param_get(node: Any, ns: argparse.Namespace) -> None:
    srv = rcl_interfaces.srv.GetParameters
    response = _call(node, srv, ns, "get_parameters", srv.Request(names=[ns.name]))
    if not response.values or response.values[0].type not in _TYPE_WORDS:
        raise SystemExit("Parameter not set.")
    value = response.values[0]
    words, is_array = _TYPE_WORDS[value.type]
    python = rclpy.parameter.parameter_value_to_python(value)
    print(f"{words}: {list(python) if is_array else python}")


def _param_set(node: Any, ns: argparse.Namespace) -> None:
    types = rcl_interfaces.srv.GetParameterTypes
    answer = _call(node, types, ns, "get_parameter_types", types.Request(names=[ns.name]))
    declared = answer.types[0] if answer.types else None
    value = parse_value(ns.value, declared)
    parameter = rclpy.parameter.Parameter(ns.name, value=value).to_parameter_msg()
    srv = rcl_interfaces.srv.SetParameters
    response = _call(node, srv, ns, "set_parameters", srv.Request(parameters=[parameter]))
    (result,) = response.results
    if not result.successful:
        raise SystemExit(f"Setting parameter failed: {result.reason}")
    print("Set parameter successful")


def parse_value(text: str, declared: int | None) -> Any:
    """The value `ros2 param set` makes of `text` (YAML), as the parameter's declared type where
    that is a lossless reading (an integer for a double, any text for a string)."""
    if declared == _STRING:
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if declared == _DOUBLE and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if declared == _DOUBLE_ARRAY and isinstance(value, list):
        return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    return text if value is None else value


def _param_list(node: Any, ns: argparse.Namespace) -> None:
    srv = rcl_interfaces.srv.ListParameters
    response = _call(node, srv, ns, "list_parameters", srv.Request())
    for name in sorted(response.result.names):
        print(f"  {name}")
