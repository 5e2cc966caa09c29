"""`vla-bridge sim`: gym-aloha's arms as a robot, closed through the bridge and a live server.

Two nodes share one process on the shim's in-process transport (as `replay` does): the
simulated robot (joint states and cameras out, commands in; ros_bridge.sim.sim_robot) and
VlaBridgeNode with its chunk executor in lockstep with the robot's joint states. The server is
whatever `--server-url` points at; with the demo model it is the ALOHA variant
(`vla-server serve --model-path "$(python -m vla_server.policies.llava.demo aloha)"`),
whose actions are the arms' 14 joint targets.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ros_bridge import compat
from ros_bridge.bridge_node import VlaBridgeNode
from ros_bridge.bridge_params import PARAMS_BY_NAME
from ros_bridge.compat import rclpy
from ros_bridge.sim.aloha_env import DEFAULT_ENV, AlohaEnv
from ros_bridge.sim.sim_log import Kind
from ros_bridge.sim.sim_report import SimRun, build_report
from ros_bridge.sim.sim_robot import JOINT_STATES_TOPIC, SimRobot, StepSettings, camera_topic

# Bridge parameters for the demo model's loop (each can be changed with --param). On a loaded
# 2-core CPU a chunk of 10 14-dim actions (140 tokens) takes 0.4-0.8 s, so chunks come about
# twice a second; 200 ms apart, its actions span 2 s and the next chunk is always in time.
SIM_DEFAULTS: dict[str, Any] = {
    "executor": "ensemble",
    "num_actions": 10,
    "action_rate_hz": 5.0,
    "deadline_ms": 500.0,
}
# Set by the simulation itself: what wires the loop together.
WIRED = (
    "server_url",
    "image_topics",
    "compressed",
    "output",
    "joint_names",
    "joint_states_topic",
    "control_rate_hz",
)
INSTRUCTIONS = {
    "gym_aloha/AlohaInsertion-v0": "insert the peg into the socket",
    "gym_aloha/AlohaTransferCube-v0": "pick up the cube and hand it over",
}


@dataclass(frozen=True)
class SimConfig:
    server_url: str
    env_id: str = DEFAULT_ENV
    seconds: float = 60.0
    rate_hz: float = 50.0
    camera_rate_hz: float = 10.0
    cameras: tuple[str, ...] = ("top",)
    width: int = 640
    height: int = 480
    seed: int = 0
    instruction: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # more bridge parameters
    record: Path | None = None
    command_timeout_s: float = 1.0
    full_render: bool = False  # shadows and anti-aliasing (~7x the rendering CPU)


def bridge_params(config: SimConfig, joint_names: list[str]) -> dict[str, Any]:
    unknown = sorted(set(config.params) - set(PARAMS_BY_NAME))
    wired = sorted(set(config.params) & set(WIRED))
    if unknown or wired:
        what = f"unknown bridge parameter(s) {unknown}" if unknown else f"{wired} are set by sim"
        raise ValueError(what)
    params = {**SIM_DEFAULTS, **config.params}
    if params["executor"] == "none":
        raise ValueError("the loop needs executor hold, interpolate, ensemble or rtc")
    instruction = config.instruction or INSTRUCTIONS.get(config.env_id)
    return (
        params
        | ({"instruction": instruction} if instruction else {})
        | {
            "server_url": config.server_url,
            "image_topics": [camera_topic(c) for c in config.cameras],
            "compressed": True,
            "output": "joint_trajectory",
            "joint_names": joint_names,
            "joint_states_topic": JOINT_STATES_TOPIC,
            "control_rate_hz": float(config.rate_hz),
        }
    )


def check_config(config: SimConfig) -> None:
    """Raises ValueError for what the command line got wrong, before anything starts."""
    _camera_rate(config)
    bridge_params(config, [])


def run_sim(
    config: SimConfig,
    stop: threading.Event | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Runs the loop for `seconds` (or until `stop`) and returns the report. rclpy must not be
    initialised yet; MUJOCO_GL defaults to osmesa."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")  # before MuJoCo loads
    stop = stop or threading.Event()
    env = AlohaEnv(
        config.env_id,
        config.seed,
        config.cameras,
        config.width,
        config.height,
        control_period_s=1 / config.rate_hz,
        fast_render=not config.full_render,
    )
    params = bridge_params(config, env.joint_names)
    rclpy.init(args=[], **({"transport": "inproc"} if compat.USING_SHIM else {}))
    with ExitStack() as cleanup:
        cleanup.callback(env.close)
        cleanup.callback(rclpy.try_shutdown)
        recorder = _recorder(config, cleanup)
        bridge = VlaBridgeNode(
            parameter_overrides=[rclpy.parameter.Parameter(k, value=v) for k, v in params.items()]
        )
        cleanup.callback(bridge.destroy_node)
        robot_node = rclpy.node.Node("aloha_sim")
        cleanup.callback(robot_node.destroy_node)
        settings = StepSettings(
            config.seconds, config.rate_hz, _camera_rate(config), config.command_timeout_s
        )
        topic = bridge.commands.topic_name
        robot = SimRobot(robot_node, env, settings, topic, list(config.cameras), recorder)
        _spin(cleanup, bridge, robot_node)
        robot.camera.start()
        cleanup.callback(robot.camera.stop)
        robot.run(stop, _ticker(config, robot, bridge, progress))
        robot.camera.stop()
        report = build_report(_gather(config, params, robot, bridge, stop.is_set()))
    return report


def _camera_rate(config: SimConfig) -> float:
    if not 0 < config.camera_rate_hz <= config.rate_hz:
        raise ValueError("camera rate must be > 0 and at most the control rate")
    return config.camera_rate_hz


def _recorder(config: SimConfig, cleanup: ExitStack) -> Any:
    if config.record is None:
        return None
    from ros_bridge.sim.sim_recorder import SimRecorder

    recorder = SimRecorder(config.record)
    cleanup.callback(recorder.close)
    return recorder


def _spin(cleanup: ExitStack, *nodes: Any) -> None:
    # Threads for: the camera callback, the executor's tick, the robot's commands, diagnostics.
    executor = rclpy.executors.MultiThreadedExecutor(num_threads=4)
    for node in nodes:
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name="sim-executor", daemon=True)
    spinner.start()
    cleanup.callback(spinner.join, 10)
    cleanup.callback(executor.shutdown, timeout_sec=10)


def _ticker(
    config: SimConfig,
    robot: SimRobot,
    bridge: VlaBridgeNode,
    progress: Callable[[dict[str, Any]], None] | None,
) -> Callable[[int], None]:
    every = max(1, round(config.rate_hz))

    def tick(n: int) -> None:
        if progress is not None and n % every == 0:
            executor = bridge.chunk_output.executor  # type: ignore[union-attr]
            progress(
                {
                    "t_s": round(n / config.rate_hz, 1),
                    "steps": n,
                    "chunks": executor.counters.chunks,
                    "actions_applied": robot.log.count(Kind.CHUNK),
                    "deadline_misses": bridge.monitor.counters["deadline_misses"],
                }
            )

    return tick


def _gather(
    config: SimConfig, params: dict[str, Any], robot: SimRobot, bridge: VlaBridgeNode, stopped: bool
) -> SimRun:
    executor = bridge.chunk_output.executor  # type: ignore[union-attr]
    setup = {
        "env": config.env_id,
        "server_url": config.server_url,
        "rate_hz": config.rate_hz,
        "camera_rate_hz": config.camera_rate_hz,
        "cameras": list(config.cameras),
        "camera_size": f"{config.width}x{config.height}",
        "seconds_requested": config.seconds,
        **{k: params.get(k, PARAMS_BY_NAME[k].default) for k in _SETUP_PARAMS},
    }
    return SimRun(
        setup=setup,
        log=robot.log,
        monitor_counters=dict(bridge.monitor.counters),
        percentiles=bridge.monitor.percentiles(),
        executor_counters=executor.counters,
        arrivals=list(executor.arrivals),
        unmatched_commands=robot.unmatched_commands,
        interrupted=stopped,
        num_actions_in_use=bridge.worker.num_actions,
        action_period_ms_in_use=bridge.worker.action_period_s * 1000.0,
        adapted=bridge.monitor.degraded,
    )


_SETUP_PARAMS = (
    "instruction",
    "unnorm_key",
    "executor",
    "num_actions",
    "action_rate_hz",
    "deadline_ms",
    "on_late",
    "ensemble_coeff",
    "rtc_execution_horizon",
)
