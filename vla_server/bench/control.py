"""Control-loop latency in one run: each of the node's latency ratios next to its target.

    python -m vla_server.bench control [--sections ...] [--quick] [--out bench_out/control]

Each section runs one of the project's benchmarks (its own server, its own in-process
baseline, in the same run) and reads off the ratios the control loop depends on:

* frontend:  main-process ms per 640x480 JPEG frame (decode, hash, resize, normalise);
* repeated:  a repeated frame with the same prompt, TTFT over the new frame's (demo VLA);
* tokens:    served ITL over the raw decode step and over the bare model forward, batch 1;
* session:   a session turn's TTFT over a prompt made of its new tokens alone;
* priority:  a high-priority robot's TTFT / ITL P99 with 8 low-priority robots over alone,
             the low robots' throughput and the node's hold bound, per `--workload`;
* bridge:    frame-to-first-action through the ROS 2 bridge over direct HTTP;
* peer:      8 robots' throughput and one robot's latency against `transformers serve`;
* flow:      a denoising policy's time to the action chunk (tiny `--tiny` default), its phase
             shares, 1/4/8 robots' throughput and action-head pass width (`bench flow`).

Writes `control.json` (every section's full result and the verdict rows) and `control.png`
(each ratio against its target) under `--out`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vla_harness.stats import summary_ms, table, write_json
from vla_server.bench.raw_step import measure_decode_steps, measure_extend_forwards

Row = dict[str, Any]
# `vla-bridge bench`, run as its own process: vla_server does not import the bridge.
BRIDGE_BENCH = (sys.executable, "-m", "ros_bridge.cli", "bench")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    p.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    p.add_argument("--robots", type=int, default=8, help="robots in the priority and peer runs")
    p.add_argument(
        "--workload",
        nargs="+",
        default=["image", "text"],
        choices=["image", "text"],
        help="the priority section's workloads (bench scheduler priority --workload)",
    )
    p.add_argument("--out", type=Path, default=Path("bench_out/control"))


def sub_args(module: str, out: Path, *argv: str) -> tuple[Any, argparse.Namespace]:
    """A benchmark module and its own command line's defaults, with `argv` on top."""
    bench = importlib.import_module(module)
    parser = argparse.ArgumentParser()
    bench.add_args(parser)
    return bench, parser.parse_args([*argv, "--out", str(out)])


def verdict(section: str, metric: str, value: float, op: str, target: float) -> Row:
    met = value <= target if op == "<=" else value >= target
    return {
        "section": section,
        "metric": metric,
        "value": round(value, 3),
        "target": f"{op} {target}",
        "met": "met" if met else "MISSED",
    }


def frontend_and_repeated(args: argparse.Namespace) -> tuple[list[Row], Any]:
    rounds = "4" if args.quick else "20"
    bench, ns = sub_args("vla_server.bench.multimodal", args.out / "multimodal", "--rounds", rounds)
    result = bench.run(ns)
    stages = {s["stage"]: s for s in result["pipeline_ms"]}
    repeated = next(r for r in result["served"] if r["case"] == "repeated frame, same prompt")
    rows = [
        verdict("frontend", "ms per 640x480 JPEG (P50)", stages[_TOTAL_STAGE]["p50"], "<=", 1.0),
        verdict(
            "frontend",
            "ms per 640x480 JPEG, --image-backend torch (P50)",
            stages[bench.TORCH_TOTAL_STAGE]["p50"],
            "<=",
            1.0,
        ),
        verdict("repeated", "repeated/new frame TTFT P50", repeated["ttft_ratio_p50"], "<=", 0.2),
    ]
    return rows, result


_TOTAL_STAGE = "total (ImagePipeline.process)"


def tokens(args: argparse.Namespace) -> tuple[list[Row], Any]:
    n = "32" if args.quick else "128"
    argv = ("--model", "demo", "--concurrency", "1", "--tokens", n, "--rounds", "3")
    bench, ns = sub_args("vla_server.bench.serving", args.out / "serving", *argv)
    (result,) = bench.run(ns)
    row = result["rows"][0]
    forwards: list[float] = []
    measure_decode_steps(result["model"], 1, int(n) * 3, forwards=forwards)
    bare = summary_ms(forwards)
    result["bare_forward_ms"] = bare
    result["bare_forward_beside_busy_core_ms"] = forward_beside_busy_core(result["model"], int(n))
    return [
        verdict("tokens", "served ITL / raw step P99", row["ratio_p99"], "<=", 1.15),
        verdict(
            "tokens", "served ITL / bare forward P50", row["itl_p50"] / bare["p50"], "<=", 1.05
        ),
        verdict(
            "tokens", "served ITL / bare forward P99", row["itl_p99"] / bare["p99"], "<=", 1.10
        ),
    ], result


def forward_beside_busy_core(model: str, steps: int) -> dict[str, float]:
    """The bare forward again while one other process spins on a core, as the front end, the
    detokenizer and the client do while a stream is served: on a machine with few cores the
    model's own forward slows down beside them, which no serving design removes."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    spinner = ctx.Process(target=_spin, args=(stop,), daemon=True)
    spinner.start()
    try:
        forwards: list[float] = []
        measure_decode_steps(model, 1, steps, forwards=forwards)
    finally:
        stop.set()
        spinner.join(5)
    busy = summary_ms(forwards)
    print(f"bare forward beside a busy core: P50 {busy['p50']:.3f} ms, P99 {busy['p99']:.3f} ms")
    return busy


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


def session(args: argparse.Namespace) -> tuple[list[Row], Any]:
    argv = ("--model", "demo", "--sessions", "1" if args.quick else "6")
    bench, ns = sub_args("vla_server.bench.scheduler_session", args.out / "session", *argv)
    result = bench.run(ns)
    later = result["rows"][-1]  # turns 1+
    result["history_floor"] = history_floor(later, ns.turn_tokens + 1, 10 if args.quick else 40)
    return [
        verdict("session", "turn TTFT / new tokens alone P50", later["vs_alone_p50"], "<=", 1.1)
    ], result


def history_floor(later: dict[str, Any], new_tokens: int, reps: int) -> dict[str, float]:
    """The bare forward of a turn's new tokens over its history vs alone, in-process: attending
    to the history is compute no serving design removes. The turn's TTFT ratio can go no lower
    than the alone TTFT plus that difference, over the alone TTFT."""
    from vla_server.policies.llava.demo import demo_model_path

    prefix = round(later["prompt_tokens_mean"]) - new_tokens
    alone = summary_ms(measure_extend_forwards(demo_model_path(), new_tokens, 0, reps))["p50"]
    turn = summary_ms(measure_extend_forwards(demo_model_path(), new_tokens, prefix, reps))["p50"]
    floor = (later["alone_ttft_p50"] + turn - alone) / later["alone_ttft_p50"]
    print(
        f"bare forward of {new_tokens} new tokens: {alone:.2f} ms alone, {turn:.2f} ms over "
        f"{prefix} history tokens; turn/alone TTFT floor {floor:.3f}"
    )
    return {"forward_alone_ms": alone, "forward_turn_ms": turn, "ttft_ratio_floor": floor}


def priority(args: argparse.Namespace) -> tuple[list[Row], Any]:
    """Each `--workload` in turn (`priority_workloads.py`), its isolation case's verdicts."""
    rows: list[Row] = []
    results = {}
    for workload in args.workload:
        argv = ("--workload", workload, "--low-robots", str(args.robots))
        argv += ("--rounds", "1", "--reps", "10") if args.quick else ()
        out = args.out / f"priority-{workload}"
        bench, ns = sub_args("vla_server.bench.scheduler_priority", out, *argv)
        result = results[workload] = bench.run(ns)
        rows += priority_verdicts(workload, result)
    return rows, results


# The image workload's latency targets are the earlier, stricter ones its isolation met.
_PRIORITY_LATENCY_TARGET = {"image": 1.1}


def priority_verdicts(workload: str, result: dict[str, Any]) -> list[Row]:
    """The isolation case against alone: latency ratios, the low robots' throughput, the node's
    hold bound, and greedy outputs unchanged."""
    iso = result["rows"][-1]  # the realtime isolation case
    section, target = f"priority ({workload})", _PRIORITY_LATENCY_TARGET.get(workload, 1.3)
    bound = result["isolation_bound"]
    differ = sum(
        int(iso[k].split("/")[0])
        for k in ("high_outputs_differ", "low_outputs_differ_vs_served_alone")
    )
    return [
        verdict(section, "TTFT P99 vs alone", iso["ttft_ratio_p99"], "<=", target),
        verdict(section, "ITL P99 vs alone", iso["itl_ratio_p99"], "<=", target),
        verdict(section, "low robots' throughput vs alone", iso["low_tput_vs_alone"], ">=", 0.8),
        verdict(
            section,
            "low stream's longest gap between outputs / (max-hold + longest step)",
            bound["ratio"],
            "<=",
            1.0,
        ),
        verdict(
            section,
            "longest deferred output / (max-hold + longest step)",
            bound["defer_ratio"],
            "<=",
            1.0,
        ),
        verdict(section, "greedy outputs that differ from alone", differ, "<=", 0),
    ]


def bridge(args: argparse.Namespace) -> tuple[list[Row], Any]:
    out = args.out / "bridge"
    argv = ("--frames", "10" if args.quick else "40", "--out", str(out))
    code = subprocess.run([*BRIDGE_BENCH, *argv]).returncode
    if code:
        raise SystemExit(f"vla-bridge bench failed (exit status {code}), its output is above")
    result = json.loads((out / "bridge.json").read_text())
    return [verdict("bridge", "bridge / direct P50", result["ratio_p50"], "<=", 1.05)], result


def check_bridge_bench() -> None:
    """Before the first section: `vla-bridge bench` refuses in one line when the [ros] extra is
    missing, and that line ends the run now rather than after the sections before the bridge's."""
    done = subprocess.run([*BRIDGE_BENCH, "--help"], capture_output=True, text=True)
    if done.returncode:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise SystemExit(f"control's bridge section: {lines[-1]}")


def peer(args: argparse.Namespace) -> tuple[list[Row], Any]:
    from vla_server.bench.control_peer import compare
    from vla_server.policies.llava.demo import demo_model_path

    rounds = compare(demo_model_path(), args.robots, 4 if args.quick else 12, 3)
    print(table(rounds, list(rounds[0])))
    worst_tp = min(r["throughput_ratio"] for r in rounds)
    worst_lat = max(r["latency_ratio"] for r in rounds)
    return [
        verdict("peer", f"{args.robots}-robot throughput / transformers serve (worst round)",
                worst_tp, ">=", 3.0),
        verdict("peer", "1-robot latency / transformers serve (worst round)", worst_lat, "<=", 0.5),
    ], {"rounds": rounds}  # fmt: skip


def flow(args: argparse.Namespace) -> tuple[list[Row], Any]:
    """A denoising policy on its tiny checkpoint (bench flow's default): the denoising passes
    of several robots batch, and that batching shows as throughput (the time to the chunk and
    its phase shares are reported)."""
    argv = ("--chunks", "4" if args.quick else "20")
    argv += ("--robots", "1", "4", str(args.robots))
    bench, ns = sub_args("vla_server.bench.flow", args.out / "flow", *argv)
    result = bench.run(ns)
    most = result["rows"][-1]
    return [
        verdict("flow", f"{most['robots']}-robot expert pass width (rows per pass)",
                most["rows_per_pass"], ">=", 2.0),
        verdict("flow", f"{most['robots']}-robot chunks/s / 1 robot", most["vs_first"], ">=", 1.5),
    ], result  # fmt: skip


SECTIONS: dict[str, Callable[[argparse.Namespace], tuple[list[Row], Any]]] = {
    "frontend": frontend_and_repeated,  # also the repeated-frame ratio
    "tokens": tokens,
    "session": session,
    "priority": priority,
    "bridge": bridge,
    "peer": peer,
    "flow": flow,
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[Row] = []
    results: dict[str, Any] = {}
    if "bridge" in args.sections:
        check_bridge_bench()
    for i, name in enumerate(args.sections):
        print(f"\n== control {i + 1}/{len(args.sections)}: {name} ==", flush=True)
        section_rows, results[name] = SECTIONS[name](args)
        rows += section_rows
    print("\ncontrol-loop ratios, one run, each next to its target")
    print(table(rows, ["section", "metric", "value", "target", "met"]))
    write_json(args.out / "control.json", {"verdicts": rows, "sections": results})
    plot_verdicts(rows, args.out / "control.png")
    print(f"wrote {args.out}/control.json and control.png")
    return {"verdicts": rows, "sections": results}


def plot_verdicts(rows: list[Row], path: Path) -> None:
    """Each ratio as a bar, its target as a tick: at a glance, which targets hold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    labels = [f"{r['section']}: {r['metric']}" for r in rows]
    values = [float(r["value"]) for r in rows]
    targets = [float(r["target"].split()[1]) for r in rows]
    colors = ["tab:green" if r["met"] == "met" else "tab:red" for r in rows]
    y = range(len(rows))
    ax.barh(y, values, color=colors)
    ax.scatter(targets, y, marker="|", s=400, color="black", label="target")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # the log axis' minor labels overlap
    ax.set_xlabel("ratio (or ms for the front end); green: target met")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
