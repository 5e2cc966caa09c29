"""`vla-bridge sim --server-url URL --report REPORT.json [--plot PNG] [--record BAG] ...`.

Prints a progress line every simulated second and a JSON summary at the end; ^C ends the run
early and still writes the report. Exits 1 when no action from the model reached the arms.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from typing import Any

from ros_bridge import extras

SUMMARY_KEYS = (
    "control_rate_hz",
    "steps",
    "chunks_received",
    "inference_rate_hz",
    "actions_applied",
    "holds",
    "deadline_misses",
    "max_joint_jump",
    "switch_jump_max",
    "switch_jump_mean",
    "step_mean",
    "chunk_overlap_mean_abs",
    "switch_gap_mean",
)


def config_from(ns: argparse.Namespace) -> Any:
    from ros_bridge.sim.run_sim import SimConfig

    size = ns.camera_size.lower().split("x")
    if len(size) != 2 or not all(v.isdigit() for v in size):
        raise ValueError(f"--camera-size must be WIDTHxHEIGHT, got {ns.camera_size!r}")
    width, height = (int(v) for v in size)
    return SimConfig(
        server_url=ns.server_url,
        env_id=ns.env,
        seconds=ns.seconds,
        rate_hz=ns.rate,
        camera_rate_hz=ns.camera_rate,
        cameras=tuple(ns.cameras.split(",")),
        width=width,
        height=height,
        seed=ns.seed,
        instruction=ns.instruction,
        params=dict(ns.param) | ({"unnorm_key": ns.unnorm_key} if ns.unnorm_key else {}),
        record=ns.record,
        full_render=ns.full_render,
        command_timeout_s=ns.command_timeout,
    )


def print_progress(line: dict[str, Any]) -> None:
    print("sim: " + " ".join(f"{k}={v}" for k, v in line.items()), flush=True)


def command(ns: argparse.Namespace) -> None:
    extras.require("vla-bridge sim", (extras.GYM_ALOHA,), extra="sim")
    from ros_bridge.sim.run_sim import check_config, run_sim
    from ros_bridge.sim.sim_report import write_report

    try:
        config = config_from(ns)
        check_config(config)
    except ValueError as exc:
        raise SystemExit(f"vla-bridge sim: {exc}") from None
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        report = run_sim(config, stop, print_progress)
    finally:
        signal.signal(signal.SIGINT, previous)
    write_report(report, ns.report)
    if ns.plot is not None:
        from ros_bridge.sim.sim_plot import plot_report

        plot_report(report, ns.plot)
    print(json.dumps({k: report[k] for k in SUMMARY_KEYS}), flush=True)
    if not report["actions_applied"]:
        raise SystemExit("vla-bridge sim: no action reached the arms; see the report")
