"""Start vla-server and the VLA bridge node: `ros2 launch vla_bridge vla_bridge.launch.py`.

Arguments (`name:=value`): the server's `model` ('' = the embedded demo), `host`, `port` and
`start_server`; `camera`, the topic the node's `image` input is remapped to; and every bridge
parameter that is not derived (e.g. `deadline_ms:=80.0 on_late:=zero compressed:=true
joint_names:='[j1, j2]'`). Off ROS, `vla-bridge` takes the same arguments as `--name value`;
both read them from `ros_bridge.bridge_params`. The server command is
`vla_harness.server_subprocess.serve_command` (`vla-server serve` run by this Python). If the
server exits, the launch shuts down: the bridge alone would only ever report it down.
"""

from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    OpaqueFunction,
    RegisterEventHandler,
    Shutdown,
)
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from ros_bridge.bridge_params import (
    LAUNCH_PARAMS,
    SERVER_ARGS,
    launch_default,
    parse_launch_value,
)
from vla_harness.server_subprocess import serve_command


def generate_launch_description():
    arguments = [
        DeclareLaunchArgument(arg.name, default_value=arg.default, description=arg.description)
        for arg in SERVER_ARGS
    ]
    for spec in LAUNCH_PARAMS:
        extra = {"choices": list(spec.choices)} if spec.choices else {}
        arguments.append(
            DeclareLaunchArgument(
                spec.name,
                default_value=launch_default(spec),
                description=spec.description,
                **extra,
            )
        )
    return LaunchDescription([*arguments, OpaqueFunction(function=_launch_setup)])


def _launch_setup(context):
    """Resolved at launch time: typed parameters, and the server only when asked for."""

    def value(name):
        return LaunchConfiguration(name).perform(context)

    host, port = value("host"), value("port")
    parameters = {spec.name: parse_launch_value(spec, value(spec.name)) for spec in LAUNCH_PARAMS}
    # ROS 2 parameter files cannot hold an empty list: leave those at the node's default.
    parameters = {k: v for k, v in parameters.items() if v != []}
    parameters["server_url"] = f"http://{host}:{port}"
    bridge = Node(
        package="vla_bridge",
        executable="bridge_node",
        name="vla_bridge",
        output="screen",
        parameters=[parameters],
        remappings=[("image", value("camera"))],
    )
    if value("start_server").lower() != "true":
        return [bridge]
    server = ExecuteProcess(
        cmd=serve_command(value("model"), host, int(port)),
        name="vla_server",
        output="screen",
        additional_env={"PYTHONUNBUFFERED": "1"},
    )
    on_exit = RegisterEventHandler(
        OnProcessExit(target_action=server, on_exit=[Shutdown(reason="vla-server exited")])
    )
    return [server, bridge, on_exit]
