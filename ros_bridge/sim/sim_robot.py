"""The simulated robot on the ROS graph: joint states and cameras out, commands in.

Each control step, in lockstep with the bridge's executor: publish the arms' JointState, capture
a camera frame every few steps, wait for the command answering that state (the one for its stamp
+ one control period), apply it for one control period of simulated time, then sleep until the
next step is due. The schedule is fixed from the start (wall clock): a late step does not shift
the ones after it, and every stamp is the step's time on that schedule, as the simulated world
advances exactly one period per step; how late a step really began is logged beside it. A
command that does not come within `command_timeout_s` leaves the arm on its previous target and
the step is logged as having none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from ros_bridge.compat import builtin_interfaces, rclpy, sensor_msgs, trajectory_msgs
from ros_bridge.sim.aloha_env import AlohaEnv
from ros_bridge.sim.sim_camera import SimCamera
from ros_bridge.sim.sim_log import (
    NS_PER_S,
    CommandMailbox,
    Kind,
    SimLog,
    StepCommand,
    StepRecord,
    parse_command,
)
from ros_bridge.tools.make_recording import topic_for

JOINT_STATES_TOPIC = "/joint_states"
JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
TRAJECTORY_TYPE = "trajectory_msgs/msg/JointTrajectory"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"


def camera_topic(camera: str) -> str:
    return topic_for(camera, "jpeg")  # image_transport's name for a compressed stream


class Recorder(Protocol):
    def write(self, topic: str, msgtype: str, msg: Any) -> None: ...


@dataclass(frozen=True)
class StepSettings:
    seconds: float
    rate_hz: float
    camera_rate_hz: float
    command_timeout_s: float = 1.0
    jpeg_quality: int = 80


class SimRobot:
    def __init__(
        self,
        node: Any,
        env: AlohaEnv,
        settings: StepSettings,
        command_topic: str,
        cameras: list[str],
        recorder: Recorder | None = None,
    ) -> None:
        self.log = SimLog(env.joint_names)
        self._env, self._settings, self._recorder = env, settings, recorder
        self._command_topic = command_topic
        self._mailbox = CommandMailbox()
        self._states = node.create_publisher(sensor_msgs.msg.JointState, JOINT_STATES_TOPIC, 10)
        node.create_subscription(
            trajectory_msgs.msg.JointTrajectory, command_topic, self._on_command, 100
        )
        sensor_qos = rclpy.qos.qos_profile_sensor_data
        self._cameras = {
            c: node.create_publisher(sensor_msgs.msg.CompressedImage, camera_topic(c), sensor_qos)
            for c in cameras
        }
        self.camera = SimCamera(env, self._publish_frame, self.log, settings.jpeg_quality)

    @property
    def unmatched_commands(self) -> int:
        return self._mailbox.unmatched

    def run(self, stop: threading.Event, tick: Callable[[int], None] = lambda n: None) -> None:
        """Steps until `seconds` or `stop`; `tick(n)` after each step (progress)."""
        s = self._settings
        period_ns = round(NS_PER_S / s.rate_hz)
        camera_every = max(1, round(s.rate_hz / s.camera_rate_hz))
        target = self._env.positions()  # the arms hold their start pose until commanded
        start_ns, start_wall_ns = time.monotonic_ns(), time.time_ns()
        for n in range(round(s.seconds * s.rate_hz)):
            if stop.is_set():
                break
            _sleep_until(start_ns + n * period_ns)
            began_ns = time.time_ns()
            stamp_ns = start_wall_ns + n * period_ns
            self._publish_state(stamp_ns)
            if n % camera_every == 0:
                self.camera.capture(stamp_ns, self._env.snapshot())
            command = self._mailbox.take(stamp_ns + period_ns, s.command_timeout_s)
            target = self._apply(StepRecord(stamp_ns, began_ns, Kind.NONE, None, target), command)
            tick(n + 1)

    def _apply(self, step: StepRecord, command: StepCommand | None) -> np.ndarray:
        """Logs the step (what it applied) and runs it; returns the target applied."""
        if command is not None:
            target = step.target
            if command.values is not None:
                target = np.asarray(command.values, dtype=np.float64)
            step = replace(step, kind=command.kind, source_ns=command.source_ns, target=target)
        self.log.steps.append(step)
        self._env.step(step.target)
        return step.target

    def _publish_state(self, stamp_ns: int) -> None:
        msg = sensor_msgs.msg.JointState(
            name=list(self.log.joint_names), position=[float(x) for x in self._env.positions()]
        )
        sec, nanosec = divmod(stamp_ns, NS_PER_S)
        msg.header.stamp = builtin_interfaces.msg.Time(sec=sec, nanosec=nanosec)
        self._states.publish(msg)
        if self._recorder is not None:
            self._recorder.write(JOINT_STATES_TOPIC, JOINT_STATE_TYPE, msg)

    def _publish_frame(self, camera: str, msg: Any) -> None:
        self._cameras[camera].publish(msg)
        if self._recorder is not None:
            self._recorder.write(camera_topic(camera), COMPRESSED_TYPE, msg)

    def _on_command(self, msg: Any) -> None:
        self._mailbox.put(parse_command(msg))
        if self._recorder is not None:
            self._recorder.write(self._command_topic, TRAJECTORY_TYPE, msg)


def _sleep_until(due_ns: int) -> None:
    wait_ns = due_ns - time.monotonic_ns()
    if wait_ns > 0:
        time.sleep(wait_ns / NS_PER_S)
