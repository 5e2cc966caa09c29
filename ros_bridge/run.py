"""`vla-bridge run`: `vla-server serve` (unless --start_server false) and VlaBridgeNode, spun
until ^C, on the shim (DDS or in-process transport) or on real ROS 2 where it is sourced.

Nothing here, directly or not, imports the bag tools: the live node works without `rosbags`.
"""

from __future__ import annotations

import argparse

from ros_bridge import compat, extras
from ros_bridge.bridge_node import VlaBridgeNode, spin
from ros_bridge.bridge_params import LAUNCH_PARAMS
from ros_bridge.compat import rclpy
from vla_harness.server_subprocess import start_server


def command(ns: argparse.Namespace) -> None:
    if compat.USING_SHIM and ns.transport == "dds":
        extras.require("vla-bridge run --transport dds", (extras.DDS,))
    server = start_server(ns.model, ns.host, int(ns.port)) if ns.start_server else None
    try:
        if server is not None:
            server.wait_healthy()
        init_kw = {"transport": ns.transport} if compat.USING_SHIM else {}
        rclpy.init(args=["--ros-args", "-r", f"image:={ns.camera}"], **init_kw)
        values = {spec.name: getattr(ns, spec.name) for spec in LAUNCH_PARAMS}
        values["server_url"] = f"http://{ns.host}:{ns.port}"
        overrides = [rclpy.parameter.Parameter(k, value=v) for k, v in values.items() if v != []]
        spin(lambda: VlaBridgeNode(parameter_overrides=overrides))
    finally:
        if server is not None:
            server.stop()
