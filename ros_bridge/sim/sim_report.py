"""The closed-loop report (ROS-free): the robot's step log, the bridge's monitor and executor.

Counts from the robot's side: every step is either `actions_applied` (an action from a chunk) or
one of `holds` (no fresh action: `late_commands`, the executor's on_late command; `stop_commands`;
`command_timeouts`, no command at all), so `steps == actions_applied + holds`.
`max_joint_jump` is the largest change of any joint target from one step to the next;
`switch_jump_max` / `switch_jump_mean` the same at the steps where the newest chunk in use
changes (a chunk switch), `step_mean` at the other chunk steps (for scale: a policy whose
chunks are noisy steps that much within a chunk); `chunk_overlap_mean_abs` how much consecutive
chunks disagree, the mean |new - previous| over the actions both have for the same time, and
`switch_gap_mean` the same at the instant of each switch (the executor's counts).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ros_bridge.chunk_executor import ChunkArrival, ExecutorCounters
from ros_bridge.sim.sim_log import NS_PER_S, Kind, SimLog

KIND_LETTERS = {Kind.CHUNK: "c", Kind.LATE: "l", Kind.STOP: "s", Kind.NONE: "n"}


@dataclass(frozen=True)
class SimRun:
    """Everything a report is made of, gathered once the loop has stopped."""

    setup: dict[str, Any]  # environment, rates and the bridge parameters that shape the loop
    log: SimLog
    monitor_counters: dict[str, int]
    percentiles: dict[str, dict[str, float | None]]
    executor_counters: ExecutorCounters
    arrivals: list[ChunkArrival]
    unmatched_commands: int
    interrupted: bool
    num_actions_in_use: int = 0  # after the bridge's adaptation (chunk_budget.py)
    action_period_ms_in_use: float = 0.0  # likewise
    adapted: str = ""  # how and why it adapted ("" if it did not)


def build_report(run: SimRun) -> dict[str, Any]:
    steps = run.log.steps
    if not steps:
        raise ValueError("the simulation ran no step")
    t0 = steps[0].stamp_ns
    seconds = (steps[-1].began_ns - steps[0].began_ns) / NS_PER_S
    applied = run.log.count(Kind.CHUNK)
    first = next((s.stamp_ns for s in steps if s.kind is Kind.CHUNK), None)
    return {
        **run.setup,
        "interrupted": run.interrupted,
        "seconds": round(seconds, 3),
        "control_rate_hz": round((len(steps) - 1) / seconds, 3) if seconds else None,
        "step_lateness_ms": _lateness(run),
        "steps": len(steps),
        "frames_published": len(run.log.frames),
        "frames_dropped": run.log.frames_dropped,
        "chunks_received": run.executor_counters.chunks,
        "inference_rate_hz": round(run.executor_counters.chunks / seconds, 3) if seconds else None,
        "actions_applied": applied,
        "holds": len(steps) - applied,
        "late_commands": run.log.count(Kind.LATE),
        "stop_commands": run.log.count(Kind.STOP),
        "command_timeouts": run.log.count(Kind.NONE),
        "unmatched_commands": run.unmatched_commands,
        "first_action_s": None if first is None else round((first - t0) / NS_PER_S, 3),
        "holds_after_first_action": sum(
            1 for s in steps if first is not None and s.stamp_ns > first and s.kind != Kind.CHUNK
        ),
        "actions_applied_per_second": _per_second(run.log),
        "num_actions_in_use": run.num_actions_in_use,
        "action_period_ms_in_use": round(run.action_period_ms_in_use, 3),
        "bridge_adapted": run.adapted,
        "deadline_misses": run.monitor_counters["deadline_misses"],
        "frame_to_action": run.percentiles["frame_to_action"],
        "ttft": run.percentiles["ttft"],
        **_jumps(run.log),
        **_switch_jumps(run.log),
        "chunk_overlap_mean_abs": _round(run.executor_counters.overlap_mean_abs),
        "switch_gap_mean": _round(run.executor_counters.switch_gap_mean),
        "bridge_counters": run.monitor_counters,
        "executor_counters": asdict(run.executor_counters),
        "chunks": _chunk_series(run, t0),
        "timeline": _timeline(run.log, t0),
    }


def _lateness(run: SimRun) -> dict[str, float]:
    """How far behind its fixed schedule each step began (wall clock)."""
    late_ms = np.array([(s.began_ns - s.stamp_ns) / 1e6 for s in run.log.steps])
    stats = {q: float(np.percentile(late_ms, p)) for q, p in (("p50", 50), ("p99", 99))}
    return {k: round(v, 3) for k, v in (stats | {"max": float(late_ms.max())}).items()}


def _jumps(log: SimLog) -> dict[str, Any]:
    targets = np.stack([s.target for s in log.steps])
    if len(targets) < 2:
        return {"max_joint_jump": 0.0, "max_joint_jump_joint": None, "max_joint_jump_t_s": None}
    steps = np.abs(np.diff(targets, axis=0))
    step, joint = np.unravel_index(int(np.argmax(steps)), steps.shape)
    t_s = (log.steps[step + 1].stamp_ns - log.steps[0].stamp_ns) / NS_PER_S
    return {
        "max_joint_jump": round(float(steps[step, joint]), 6),
        "max_joint_jump_joint": log.joint_names[joint],
        "max_joint_jump_t_s": round(t_s, 3),
    }


def _per_second(log: SimLog) -> list[int]:
    """Actions applied in each whole second of the run."""
    t0 = log.steps[0].stamp_ns
    counts = [0] * (1 + (log.steps[-1].stamp_ns - t0) // NS_PER_S)
    for s in log.steps:
        counts[(s.stamp_ns - t0) // NS_PER_S] += s.kind is Kind.CHUNK
    return counts


def _switch_jumps(log: SimLog) -> dict[str, Any]:
    """The joint steps at chunk switches: consecutive chunk commands from different chunks."""
    jumps: list[float] = []
    steps: list[float] = []
    for prev, s in zip(log.steps, log.steps[1:], strict=False):
        if Kind.CHUNK == prev.kind == s.kind:
            step = float(np.abs(s.target - prev.target).max())
            (jumps if prev.source_ns != s.source_ns else steps).append(step)
    return {
        "switches": len(jumps),
        "switch_jump_max": _round(max(jumps, default=None)),
        "switch_jump_mean": _round(float(np.mean(jumps)) if jumps else None),
        "step_mean": _round(float(np.mean(steps)) if steps else None),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _chunk_series(run: SimRun, t0: int) -> list[dict[str, float]]:
    """Per chunk: its frame's stamp and the time from the frame's publication (after rendering)
    to its first action reaching the executor."""
    published = {f.stamp_ns: f.published_ns for f in run.log.frames}
    return [
        {
            "stamp_s": round((a.stamp_ns - t0) / NS_PER_S, 4),
            "frame_to_action_ms": round((a.received_ns - published[a.stamp_ns]) / 1e6, 3),
        }
        for a in run.arrivals
        if a.stamp_ns in published
    ]


def _timeline(log: SimLog, t0: int) -> dict[str, Any]:
    """Per step: time, what was applied (c chunk, l late, s stop, n none), the source chunk's
    age and the targets of the joint that jumped most (for the plot)."""
    joint = _jumps(log)["max_joint_jump_joint"] or log.joint_names[0]
    index = log.joint_names.index(joint)
    return {
        "start_ns": t0,
        "t_s": [round((s.stamp_ns - t0) / NS_PER_S, 4) for s in log.steps],
        "kind": "".join(KIND_LETTERS[s.kind] for s in log.steps),
        "source_s": [
            None if s.source_ns is None else round((s.source_ns - t0) / NS_PER_S, 4)
            for s in log.steps
        ],
        "joint": joint,
        "values": [round(float(s.target[index]), 5) for s in log.steps],
    }


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_dump(report) + "\n")


def _dump(value: Any, indent: str = "") -> str:
    """JSON with one key per line, and each list (a per-step series) on one line."""
    if isinstance(value, dict) and value:
        inner = indent + "  "
        items = (f"{inner}{json.dumps(k)}: {_dump(v, inner)}" for k, v in sorted(value.items()))
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return json.dumps(value, separators=(",", ":"))
