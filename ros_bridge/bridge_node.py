"""VlaBridgeNode: camera frames in, streamed actions out, latency on /diagnostics.

A thin rclpy node (real ROS 2 or the shim, via `ros_bridge.compat`): it declares the
parameters, subscribes to the cameras with sensor-data QoS, validates and hashes each frame in
the callback, and hands it to the BridgeWorker, whose own thread does all network I/O and calls
back `publish_action` / `publish_late` the moment there is something to send. Like any rclpy node
it logs to /rosout and answers `ros2 param`; an accepted parameter change is logged too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ros_bridge.action_output import NS_PER_S, action_message, late_message, output_type
from ros_bridge.bridge_params import PARAM_RANGES, PARAMS, PARAMS_BY_NAME, ParamSpec
from ros_bridge.bridge_worker import BridgeWorker, FrameJob, WorkerConfig
from ros_bridge.camera_frame import frame_from_msg
from ros_bridge.chunk_executor import ExecutorMode, RtcGuidance
from ros_bridge.chunk_output import ChunkOutput, action_rate_hz, executor_config
from ros_bridge.compat import diagnostic_msgs, rcl_interfaces, rclpy, sensor_msgs
from ros_bridge.frame_input import BadFrame, PreparedImage, prepare_image
from ros_bridge.late_policy import LateCommand, OnLate, parse_on_late
from ros_bridge.latency_monitor import Budgets, LatencyMonitor
from ros_bridge.request_body import RequestSettings
from ros_bridge.signals import stop_on_sigint

NODE_NAME = "vla_bridge"
_THROTTLE_S = 1.0


class VlaBridgeNode(rclpy.node.Node):
    """`http_transport` replaces the HTTP connection (tests); other kwargs go to rclpy's Node."""

    def __init__(self, *, http_transport: Any = None, **node_kwargs: Any) -> None:
        super().__init__(NODE_NAME, **node_kwargs)
        for spec in PARAMS:
            _declare(self, spec)
        values = self._values()
        self.monitor = LatencyMonitor(_budgets(values), window=values["latency_window"])
        self._mode = values["output"]
        output_type(self._mode)  # rejects an unknown output mode at start-up
        self.commands = self.create_publisher(output_type(self._mode), values["action_topic"], 10)
        self.chunk_output = (
            ChunkOutput(self, values, self.commands) if values["executor"] != "none" else None
        )
        self.diagnostics = self.create_publisher(
            diagnostic_msgs.msg.DiagnosticArray, "/diagnostics", 1
        )
        self.worker = BridgeWorker(
            values["server_url"],
            _worker_config(values),
            self.monitor,
            self,
            api_key=values["api_key"],
            transport=http_transport,
        )
        self._latest: dict[int, PreparedImage] = {}
        self.trigger_frames_handled = 0  # trigger-camera frames dropped or handed to the worker
        msg_type = (
            sensor_msgs.msg.CompressedImage if values["compressed"] else sensor_msgs.msg.Image
        )
        sensor_qos = rclpy.qos.qos_profile_sensor_data
        self._topics = [  # resolved (namespace, remaps): what logs and diagnostics name
            self.create_subscription(
                msg_type, topic, partial(self._on_image, index), sensor_qos
            ).topic_name
            for index, topic in enumerate(values["image_topics"])
        ]
        self.create_timer(values["diagnostics_period_s"], self.publish_diagnostics)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.worker.start()
        self.get_logger().info(
            f"cameras {', '.join(self._topics)} -> {self.commands.topic_name} ({self._mode}); "
            f"server {values['server_url']}"
        )

    def destroy_node(self) -> None:
        self.worker.stop()
        super().destroy_node()

    # --- parameters ----------------------------------------------------------------------
    def _values(self, changes: Sequence[Any] = ()) -> dict[str, Any]:
        values = {spec.name: _value(self, spec) for spec in PARAMS}
        values.update({p.name: p.value for p in changes})
        return values

    def _on_set_parameters(self, params: list[Any]) -> Any:
        values = self._values(params)
        try:
            config, budgets = _worker_config(values), _budgets(values)
            chunks = executor_config(values) if self.chunk_output is not None else None
        except ValueError as exc:
            return rcl_interfaces.msg.SetParametersResult(successful=False, reason=str(exc))
        self.worker.set_config(config)
        self.monitor.set_budgets(budgets)
        if self.chunk_output is not None and chunks is not None:
            # the worker keeps an adapted period unless the rate or num_actions changed
            period_ns = round(self.worker.action_period_s * NS_PER_S)
            self.chunk_output.reconfigure(replace(chunks, action_period_ns=period_ns))
        changes = ", ".join(f"{p.name}={p.value!r}" for p in params)
        self.get_logger().info(f"parameters set: {changes}")
        return rcl_interfaces.msg.SetParametersResult(successful=True)

    # --- camera input --------------------------------------------------------------------
    def _on_image(self, index: int, msg: Any) -> None:
        arrived_s = time.monotonic()
        if index:
            self._take_frame(index, msg, arrived_s)
            return
        self.monitor.frame_received()
        try:
            self._take_frame(index, msg, arrived_s)
        finally:
            self.trigger_frames_handled += 1  # callbacks of one node never run concurrently

    def _take_frame(self, index: int, msg: Any, arrived_s: float) -> None:
        topic = self._topics[index]
        frame = frame_from_msg(topic, msg, time.time_ns())
        try:
            image = prepare_image(frame, self.worker.digest)
        except BadFrame as exc:
            self.monitor.frame_dropped_bad(f"{topic}: {exc}")
            self.get_logger().warning(
                f"dropped a frame on {topic}: {exc}", throttle_duration_sec=_THROTTLE_S
            )
            return
        if index:
            self._latest[index] = image
            return
        others = [self._latest.get(i) for i in range(1, len(self._topics))]
        if any(other is None for other in others):
            self.get_logger().info(
                "waiting for a first frame on every camera", throttle_duration_sec=_THROTTLE_S
            )
            return
        images = (image, *others)
        state = self.chunk_output.position if self.chunk_output is not None else None
        if state is None and self.worker.needs_state:
            self.get_logger().info(
                "the policy reads the robot state: waiting for a first JointState on "
                "joint_states_topic",
                throttle_duration_sec=_THROTTLE_S,
            )
            return
        self.worker.submit(FrameJob(frame.stamp, images, state), arrived_s)  # type: ignore[arg-type]

    # --- ActionSink (called on the worker thread) ----------------------------------------
    def publish_action(self, stamp: tuple[int, int], index: int, action: Sequence[float]) -> None:
        if self.chunk_output is not None:
            self.chunk_output.add_action(stamp, index, action)
            return
        values = self._values()
        self.commands.publish(
            action_message(
                self._mode,
                action,
                stamp=stamp,
                index=index,
                joint_names=values["joint_names"],
                control_rate_hz=action_rate_hz(values),
            )
        )

    def publish_late(self, command: LateCommand) -> None:
        if self.chunk_output is not None:
            # A late frame leaves the plan's actions that are still due: the executor sends the
            # on_late command once none covers the period. A failed server, or `stop`, ends it.
            if command.failed or command.policy is OnLate.STOP:
                self.chunk_output.expire()
            return
        stamp = command.stamp or self.get_clock().now().seconds_nanoseconds()
        joint_names = self._values()["joint_names"]
        msg = late_message(self._mode, command, stamp=stamp, joint_names=joint_names)
        if msg is not None:
            self.commands.publish(msg)

    def rtc_guidance(self, stamp: tuple[int, int], horizon: int) -> RtcGuidance | None:
        if self.chunk_output is None:
            return None
        stamp_ns = stamp[0] * NS_PER_S + stamp[1]
        return self.chunk_output.executor.rtc_guidance(stamp_ns, horizon)

    def set_action_period(self, period_s: float) -> None:
        if self.chunk_output is not None:
            config = self.chunk_output.executor.config
            period_ns = round(period_s * NS_PER_S)
            self.chunk_output.reconfigure(replace(config, action_period_ns=period_ns))

    def report(self, level: str, message: str) -> None:
        log = {"info": self.get_logger().info, "warn": self.get_logger().warning}
        log.get(level, self.get_logger().error)(message, throttle_duration_sec=_THROTTLE_S)

    # --- diagnostics ---------------------------------------------------------------------
    def publish_diagnostics(self) -> None:
        msgs = diagnostic_msgs.msg
        array = msgs.DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        hardware_id = f"vla-server {self.worker.server_url}"
        for report in self.monitor.statuses(prefix=f"{self.get_name()}: "):
            array.status.append(
                msgs.DiagnosticStatus(
                    level=bytes([int(report.level)]),
                    name=report.name,
                    message=report.message,
                    hardware_id=hardware_id,
                    values=[msgs.KeyValue(key=k, value=v) for k, v in report.values],
                )
            )
        self.diagnostics.publish(array)


def _declare(node: Any, spec: ParamSpec) -> None:
    descriptor = rcl_interfaces.msg.ParameterDescriptor(
        description=spec.description,
        read_only=not spec.dynamic,
        additional_constraints=f"one of: {', '.join(spec.choices)}" if spec.choices else "",
    )
    if spec.name in PARAM_RANGES:
        low, high = PARAM_RANGES[spec.name]
        if spec.kind is int:
            descriptor.integer_range = [
                rcl_interfaces.msg.IntegerRange(from_value=int(low), to_value=int(high), step=1)
            ]
        else:
            descriptor.floating_point_range = [
                rcl_interfaces.msg.FloatingPointRange(from_value=low, to_value=high)
            ]
    # An empty list cannot carry its element type, so it is declared by type (rclpy's rule).
    default = rclpy.parameter.Parameter.Type.STRING_ARRAY if spec.default == [] else spec.default
    node.declare_parameter(spec.name, default, descriptor)


def _value(node: Any, spec: ParamSpec) -> Any:
    if spec.default == []:
        fallback = rclpy.parameter.Parameter(
            spec.name, rclpy.parameter.Parameter.Type.STRING_ARRAY, []
        )
        return list(node.get_parameter_or(spec.name, fallback).value)
    value = node.get_parameter(spec.name).value
    return list(value) if spec.kind is list else value


def _worker_config(values: dict[str, Any]) -> WorkerConfig:
    for name in ("control_rate_hz", "deadline_ms", "num_actions"):
        if not values[name] > 0:
            raise ValueError(f"{name} must be > 0, got {values[name]}")
    if values["output"] not in PARAMS_BY_NAME["output"].choices:
        raise ValueError(f"output must be one of {PARAMS_BY_NAME['output'].choices}")
    request = RequestSettings(
        instruction=values["instruction"],
        unnorm_key=values["unnorm_key"],
        num_actions=values["num_actions"],
        priority=values["priority"],
        session=values["session"],
        max_new_tokens=max(values["max_new_tokens"], 0),
        control_period_ms=1000.0 / action_rate_hz(values),
    )
    return WorkerConfig(
        request=request,
        deadline_ms=values["deadline_ms"],
        on_late=parse_on_late(values["on_late"]),
        action_width=len(values["joint_names"]) or None,
        executor_times_actions=values["executor"] != ExecutorMode.NONE,
        rtc_horizon=_rtc_horizon(values),
    )


def _rtc_horizon(values: dict[str, Any]) -> int:
    if values["executor"] != ExecutorMode.RTC:
        return 0
    if not values["rtc_execution_horizon"] >= 1:
        raise ValueError(
            f"rtc_execution_horizon must be >= 1, got {values['rtc_execution_horizon']}"
        )
    return values["rtc_execution_horizon"]


def _budgets(values: dict[str, Any]) -> Budgets:
    for name in ("ttft_budget_ms", "itl_p99_budget_ms"):
        if not values[name] > 0:
            raise ValueError(f"{name} must be > 0, got {values[name]}")
    return Budgets(
        deadline_ms=values["deadline_ms"],
        ttft_budget_ms=values["ttft_budget_ms"],
        itl_p99_budget_ms=values["itl_p99_budget_ms"],
        stale_after_s=max(2.0, 3.0 / values["control_rate_hz"]),
    )


def spin(make_node: Callable[[], VlaBridgeNode]) -> None:
    """Runs the node made by `make_node` until ^C or shutdown, then destroys it and shuts
    rclpy down (rclpy must be initialised)."""
    node = None
    try:
        node = make_node()
        executor = rclpy.executors.MultiThreadedExecutor(num_threads=2)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


def main(args: list[str] | None = None) -> None:
    """`ros2 run vla_bridge bridge_node` (and the launch file's Node action)."""
    stop_on_sigint()
    rclpy.init(args=args)
    spin(VlaBridgeNode)
