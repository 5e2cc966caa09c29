"""Drive a 7-joint arm from camera frames with the VLA bridge node, inside your own process.

    vla-server serve --port 30000 &                   # the demo model, or --model-path ...
    python examples/ros_node.py --server-url http://127.0.0.1:30000 --demo-bag

The same code runs under ROS 2 (source your workspace: `ros_bridge.compat` picks the real
rclpy) and without it (the shim; add --transport dds to talk to ROS 2 nodes on this machine).
With --demo-bag the committed recording is played into the camera topic in this process;
without it, the node listens to --camera, e.g. a camera driver's compressed topic.

It shows the pieces a robot integration touches: parameters at construction, a remap of the
node's `image` input, commands for ros2_control's forward_command_controller, the
/diagnostics summary, and a runtime parameter change (a new instruction) through
set_parameters, which the node validates in its on-set callback.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

from ros_bridge import compat
from ros_bridge.bags import paced, read_frames
from ros_bridge.bridge_node import VlaBridgeNode
from ros_bridge.compat import diagnostic_msgs, rclpy, sensor_msgs, std_msgs
from ros_bridge.replay import camera_msg

BAG = Path(__file__).resolve().parents[1] / "tests/data/aloha_transfer_cube_10hz"
JOINTS = [f"left_arm_joint_{i}" for i in range(6)] + ["left_gripper"]
LEVELS = {b"\x00": "OK", b"\x01": "WARN", b"\x02": "ERROR", b"\x03": "STALE"}


def make_node(server_url: str, camera: str) -> VlaBridgeNode:
    params = {
        "server_url": server_url,
        "image_topics": ["image"],  # remapped to `camera` below
        "compressed": True,
        "instruction": "pick up the cube",
        "unnorm_key": "aloha_left",
        "num_actions": 2,
        "deadline_ms": 400.0,
        "on_late": "hold",
        "output": "float64_multiarray",
        "joint_names": JOINTS,
        "action_topic": "/forward_position_controller/commands",
    }
    overrides = [rclpy.parameter.Parameter(k, value=v) for k, v in params.items()]
    return VlaBridgeNode(
        parameter_overrides=overrides, cli_args=["--ros-args", "-r", f"image:={camera}"]
    )


def watch(node: Any) -> None:
    def on_command(msg: Any) -> None:
        print("command", [round(x, 3) for x in msg.data])

    def on_diagnostics(msg: Any) -> None:
        print("diagnostics", {s.name: LEVELS[s.level] for s in msg.status})

    node.create_subscription(
        std_msgs.msg.Float64MultiArray, "/forward_position_controller/commands", on_command, 10
    )
    node.create_subscription(
        diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", on_diagnostics, 10
    )


def play_demo_bag(node: Any, camera: str) -> None:
    publisher = node.create_publisher(
        sensor_msgs.msg.CompressedImage, camera, rclpy.qos.qos_profile_sensor_data
    )
    for item in paced(read_frames(BAG)):
        publisher.publish(camera_msg(item.frame))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-url", default="http://127.0.0.1:30000")
    parser.add_argument("--camera", default="/camera/top/image_raw/compressed")
    parser.add_argument("--demo-bag", action="store_true", help="play the committed recording")
    parser.add_argument("--transport", choices=("inproc", "dds"), default="inproc")
    args = parser.parse_args()
    rclpy.init(args=[], **({"transport": args.transport} if compat.USING_SHIM else {}))
    bridge = make_node(args.server_url, args.camera)
    helper = rclpy.node.Node("example_helper")
    watch(helper)
    executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
    executor.add_node(bridge)
    executor.add_node(helper)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        if args.demo_bag:
            threading.Timer(
                5.0,
                lambda: bridge.set_parameters(
                    [rclpy.parameter.Parameter("instruction", value="put the cube down")]
                ),
            ).start()
            play_demo_bag(helper, args.camera)
            bridge.worker.wait_idle(30)
        else:
            while True:
                time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        executor.shutdown(timeout_sec=10)
        bridge.destroy_node()
        helper.destroy_node()
        rclpy.try_shutdown()
    print("counters", bridge.monitor.counters)


if __name__ == "__main__":
    main()
