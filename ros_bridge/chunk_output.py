"""The chunk executor on the bridge node (`executor` other than none).

The worker's streamed actions go into a ChunkExecutor instead of straight out; one command per
control period comes out, either on a timer at `control_rate_hz` (the command for now + one
period) or, with `joint_states_topic` set, in lockstep with the robot: each JointState message is
answered with the command for its stamp + one period, and its positions are what `hold` keeps
before the first chunk. The ticks run in a callback group of their own, so a camera callback
never delays a command. `on_late` no longer publishes by itself: a late frame leaves the plan's
actions that are still due in place, and the executor sends the on_late command every period
that no chunk covers; a failed or refused request (or `stop`) drops the plan at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ros_bridge.action_output import NS_PER_S, chunk_command_message, late_message
from ros_bridge.chunk_executor import ChunkCommand, ChunkExecutor, ExecutorConfig, ExecutorMode
from ros_bridge.compat import rclpy, sensor_msgs
from ros_bridge.late_policy import LateCommand, parse_on_late


def action_rate_hz(values: dict[str, Any]) -> float:
    """The spacing of a chunk's actions as a rate: action_rate_hz, or control_rate_hz if 0."""
    rate = values["action_rate_hz"]
    if not (rate >= 0 and math.isfinite(rate)):
        raise ValueError(f"action_rate_hz must be >= 0, got {rate}")
    return rate or values["control_rate_hz"]


def executor_config(values: dict[str, Any]) -> ExecutorConfig:
    coeff = values["ensemble_coeff"]
    if not math.isfinite(coeff):
        raise ValueError(f"ensemble_coeff must be finite, got {coeff}")
    return ExecutorConfig(
        mode=ExecutorMode(values["executor"]),
        action_period_ns=round(NS_PER_S / action_rate_hz(values)),
        control_period_ns=round(NS_PER_S / values["control_rate_hz"]),
        on_late=parse_on_late(values["on_late"]),
        ensemble_coeff=coeff,
        width=len(values["joint_names"]) or None,
    )


class ChunkOutput:
    def __init__(self, node: Any, values: dict[str, Any], publisher: Any) -> None:
        config = executor_config(values)
        self.executor = ChunkExecutor(config)
        self._node = node
        self._publisher = publisher
        self._mode = values["output"]
        self._joint_names = list(values["joint_names"])
        self._period_ns = config.control_period_ns
        self._on_late = config.on_late
        self.position: tuple[float, ...] | None = None  # the robot's, from its last JointState
        group = rclpy.callback_groups.MutuallyExclusiveCallbackGroup()
        self._timer = None
        if values["joint_states_topic"]:
            node.create_subscription(
                sensor_msgs.msg.JointState,
                values["joint_states_topic"],
                self._on_joint_state,
                10,
                callback_group=group,
            )
        else:
            period_s = self._period_ns / NS_PER_S
            self._timer = node.create_timer(period_s, self._on_timer, callback_group=group)

    def reconfigure(self, config: ExecutorConfig) -> None:
        """Dynamic parameters changed (on_late, control_rate_hz, ...)."""
        self.executor.reconfigure(config)
        self._on_late = config.on_late
        if config.control_period_ns != self._period_ns:
            self._period_ns = config.control_period_ns
            if self._timer is not None:
                self._timer.timer_period_ns = config.control_period_ns

    def add_action(self, stamp: tuple[int, int], index: int, action: Sequence[float]) -> None:
        """Raises ValueError for a width the joints do not have (the worker counts it)."""
        self.executor.add_action(_ns(stamp), index, action, time.time_ns())

    def expire(self) -> None:
        self.executor.expire()

    def _on_timer(self) -> None:
        now_ns = self._node.get_clock().now().nanoseconds
        self._send(self.executor.command(now_ns + self._period_ns))

    def _on_joint_state(self, msg: Any) -> None:
        stamp_ns = _ns((msg.header.stamp.sec, msg.header.stamp.nanosec))
        current = list(msg.position) or None
        self.position = tuple(current) if current else None
        self._send(self.executor.command(stamp_ns + self._period_ns, current))

    def _send(self, command: ChunkCommand | None) -> None:
        if command is None:
            return
        msg = self._message(command)
        if msg is not None:
            self._publisher.publish(msg)

    def _message(self, command: ChunkCommand) -> Any:
        target = divmod(command.target_ns, NS_PER_S)
        if command.source_ns is None:
            late = LateCommand(self._on_late, command.values)
            return late_message(self._mode, late, stamp=target, joint_names=self._joint_names)
        return chunk_command_message(
            self._mode,
            command.values or (),
            source=divmod(command.source_ns, NS_PER_S),
            offset_ns=command.target_ns - command.source_ns,
            joint_names=self._joint_names,
        )


def _ns(stamp: tuple[int, int]) -> int:
    return stamp[0] * NS_PER_S + stamp[1]
