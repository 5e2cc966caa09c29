"""The simulated robot's ROS-free parts: reading the executor's commands, pairing them with
steps, and the report's counts (no MuJoCo, no server)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ros_bridge.chunk_executor import ChunkArrival, ExecutorCounters
from ros_bridge.compat import builtin_interfaces, trajectory_msgs
from ros_bridge.sim.run_sim import SimConfig, bridge_params
from ros_bridge.sim.sim_compare import min_after_first, plot, table
from ros_bridge.sim.sim_log import (
    CommandMailbox,
    FrameRecord,
    Kind,
    SimLog,
    StepCommand,
    StepRecord,
    parse_command,
)
from ros_bridge.sim.sim_report import SimRun, build_report

NS = 1_000_000_000
PERCENTILES = {m: {"p50_ms": None, "p99_ms": None, "n": 0} for m in ("frame_to_action", "ttft")}


def trajectory(stamp_ns: int, offset_ns: int | None, values: list[float]) -> object:
    msg = trajectory_msgs.msg.JointTrajectory(joint_names=["a", "b"])
    msg.header.stamp = builtin_interfaces.msg.Time(sec=stamp_ns // NS, nanosec=stamp_ns % NS)
    if offset_ns is not None:
        tfs = builtin_interfaces.msg.Duration(sec=offset_ns // NS, nanosec=offset_ns % NS)
        msg.points = [
            trajectory_msgs.msg.JointTrajectoryPoint(positions=values, time_from_start=tfs)
        ]
    return msg


def test_commands_are_read_as_chunk_late_or_stop_with_the_time_they_are_for() -> None:
    chunk = parse_command(trajectory(5 * NS, 1_250_000_000, [1.0, 2.0]))
    assert chunk == StepCommand(6_250_000_000, Kind.CHUNK, 5 * NS, (1.0, 2.0))
    assert parse_command(trajectory(7 * NS, 0, [3.0, 4.0])) == StepCommand(
        7 * NS, Kind.LATE, None, (3.0, 4.0)
    )
    assert parse_command(trajectory(8 * NS, None, [])) == StepCommand(8 * NS, Kind.STOP, None, None)


def test_mailbox_pairs_a_step_with_the_command_for_its_time_and_drops_stale_ones() -> None:
    box = CommandMailbox()
    box.put(StepCommand(10, Kind.LATE, None, (0.0,)))  # for a step that already gave up
    box.put(StepCommand(30, Kind.LATE, None, (1.0,)))
    threading.Timer(0.05, box.put, [StepCommand(20, Kind.CHUNK, 1, (2.0,))]).start()
    taken = box.take(20, timeout_s=30.0)
    assert taken is not None and taken.values == (2.0,)
    assert box.unmatched == 1  # the one for 10; the one for 30 waits for its step
    assert box.take(25, timeout_s=0.01) is None
    taken = box.take(30, timeout_s=30.0)
    assert taken is not None and taken.values == (1.0,)


def tiny_run() -> SimRun:
    """Five steps: a hold, two chunk steps from different chunks, a hold, a chunk step."""
    log = SimLog(["a", "b"])
    targets = [[0.0, 0.0], [0.1, 0.0], [0.1, -0.3], [0.1, -0.3], [0.15, -0.3]]
    kinds = [Kind.LATE, Kind.CHUNK, Kind.CHUNK, Kind.LATE, Kind.CHUNK]
    for n, (target, kind) in enumerate(zip(targets, kinds, strict=True)):
        source = n * 20_000_000 - 5 if kind is Kind.CHUNK else None
        began = n * 20_000_000 + (7_000_000 if n == 2 else 0)  # step 2 began 7 ms late
        log.steps.append(StepRecord(n * 20_000_000, began, kind, source, np.array(target)))
    log.frames.append(FrameRecord(0, 3_000_000))
    return SimRun(
        setup={"rate_hz": 50.0},
        log=log,
        monitor_counters={"deadline_misses": 0},
        percentiles=PERCENTILES,
        executor_counters=ExecutorCounters(chunks=1),
        arrivals=[ChunkArrival(0, 15_000_000)],
        unmatched_commands=0,
        interrupted=False,
    )


def test_report_counts_add_up_and_the_jump_is_the_largest_target_step() -> None:
    r = build_report(tiny_run())
    assert (r["steps"], r["actions_applied"], r["holds"], r["late_commands"]) == (5, 3, 2, 2)
    assert r["control_rate_hz"] == pytest.approx(50.0)
    assert r["step_lateness_ms"] == {"p50": 0.0, "p99": pytest.approx(6.72), "max": 7.0}
    assert r["max_joint_jump"] == pytest.approx(0.3) and r["max_joint_jump_joint"] == "b"
    # steps 1 -> 2 switch chunks (both chunk commands, different sources); 3 -> 4 follows a hold
    assert (r["switches"], r["switch_jump_max"]) == (1, pytest.approx(0.3))
    assert r["chunk_overlap_mean_abs"] is None  # one chunk: nothing overlapped
    assert r["actions_applied_per_second"] == [3]  # 5 steps of 20 ms: all in second 0
    assert r["timeline"]["kind"] == "lcclc" and r["timeline"]["joint"] == "b"
    assert r["chunks"] == [{"stamp_s": 0.0, "frame_to_action_ms": 12.0}]
    assert r["first_action_s"] == pytest.approx(0.02) and r["holds_after_first_action"] == 1


def test_sim_refuses_parameters_it_wires_itself_and_a_missing_executor() -> None:
    def params(**extra: object) -> dict:
        return bridge_params(SimConfig("http://x", params=dict(extra)), ["a", "b"])

    assert params()["joint_states_topic"] == "/joint_states"
    assert params(executor="hold")["executor"] == "hold"
    with pytest.raises(ValueError, match="set by sim"):
        params(output="float64_multiarray")
    with pytest.raises(ValueError, match="unknown bridge parameter"):
        params(exeuctor="hold")
    with pytest.raises(ValueError, match="needs executor"):
        params(executor="none")


def test_sim_takes_unnorm_key_directly() -> None:
    import argparse

    from ros_bridge.cli import add_sim_args
    from ros_bridge.sim.sim_command import config_from

    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    ns = parser.parse_args(["--server-url", "u", "--report", "r.json", "--unnorm-key", "aloha"])
    assert config_from(ns).params == {"unnorm_key": "aloha"}
    ns = parser.parse_args(["--server-url", "u", "--report", "r.json"])
    assert "unnorm_key" not in config_from(ns).params


def test_reports_side_by_side_as_a_table_and_a_plot(tmp_path) -> None:
    r = build_report(tiny_run())
    text = table({"rtc": r, "ensemble": r})
    head, _, *rows = text.splitlines()
    assert head.startswith("| run | actions applied / steps |") and len(rows) == 2
    assert rows[0].startswith("| rtc | 3 / 5 | 1 | 0 |")
    assert min_after_first(r) is None  # a 0.08 s run has no whole second after the first
    long = {**r, "seconds": 4.0, "actions_applied_per_second": [0, 12, 50, 7, 50]}
    assert min_after_first(long) == 7
    plot({"rtc": r, "ensemble": r}, tmp_path / "compare.png")
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"
