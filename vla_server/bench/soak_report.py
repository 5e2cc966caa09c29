"""The soak benchmark's tables, JSON and plot."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from vla_harness.stats import table, write_json
from vla_server.bench.soak_stats import (
    latency_ratio,
    per_minute_latency,
    per_minute_mean,
    results_by_kind,
    slope_per_minute,
)
from vla_server.bench.soak_traffic import Recorder, SlowlorisResult

SLOPE_SKIP_S = 60.0  # the first minute fills the caches (embeddings, prefixes)


def _slopes(series: dict[str, list[tuple[float, float]]], total_s: float) -> dict[str, float]:
    """Least-squares slope per minute of each series, after the caches' first fill."""
    skip = min(SLOPE_SKIP_S, total_s / 2)
    return {name: slope_per_minute([s for s in v if s[0] >= skip]) for name, v in series.items()}


def summarise(
    rec: Recorder, mem: Any, slowloris: SlowlorisResult, end: dict[str, Any], total_s: float
) -> dict[str, Any]:
    minutes = math.ceil(total_s / 60.0)
    robots = [o for o in rec.outcomes if o.kind == "robot"]
    rows = per_minute_latency(robots, minutes)
    rss_minutes = {name: per_minute_mean(v, minutes) for name, v in mem.rss.items()}
    for row in rows:
        for name, values in rss_minutes.items():
            row[f"{name} MB"] = values[row["minute"]]
        row["main fds"] = per_minute_mean(mem.fds, minutes)[row["minute"]]
    by_kind = results_by_kind(rec.outcomes)
    return {
        "requests": len(rec.outcomes),
        "lost": sum(k["lost"] for k in by_kind.values()),
        "results_by_kind": by_kind,
        "late_ticks": rec.events["late_ticks"],
        "per_minute": rows,
        "slowloris": {
            "connections": slowloris.opened,
            "closed_by_node": slowloris.closed_by_server,
            "answered_by_node": slowloris.answered,
            "robot_p50_ratio": latency_ratio(robots, "slowloris", "unloaded", 50),
            "robot_p99_ratio": latency_ratio(robots, "slowloris", "unloaded", 99),
        },
        "rss_slope_mb_per_min": _slopes(mem.rss, total_s),
        "main_fds_slope_per_min": _slopes({"fds": mem.fds}, total_s)["fds"],
        "rss_samples_mb": mem.rss,
        "main_fds_samples": mem.fds,
        "end": end,
    }


def _print(s: dict[str, Any]) -> None:
    rss_cols = [c for c in s["per_minute"][0] if c.endswith(" MB")]
    cols = ["minute", "requests", "ok", "lost", "p50_ms", "p99_ms", *rss_cols, "main fds"]
    print("\nrobots per minute (latency: request to its final chunk; RSS: mean of the minute)")
    print(table(s["per_minute"], cols))
    classes = sorted({c for k in s["results_by_kind"].values() for c in k} - {"lost"})
    kinds = [{"client": k, **v} for k, v in s["results_by_kind"].items()]
    print("\nrequests by client and how they ended")
    print(table(kinds, ["client", *classes, "lost"]))
    sl = s["slowloris"]
    print(
        f"\nslowloris: {sl['connections']} connections, {sl['closed_by_node']} closed by the "
        f"node, {sl['answered_by_node']} answered; robot P50 x{sl['robot_p50_ratio']:.2f}, "
        f"P99 x{sl['robot_p99_ratio']:.2f} of the unloaded phase's"
    )
    slopes = ", ".join(f"{k} {v:+.2f}" for k, v in s["rss_slope_mb_per_min"].items())
    print(f"RSS slope (MB/min): {slopes}; main fds slope {s['main_fds_slope_per_min']:+.2f}/min")
    end = s["end"]
    print(
        f"requests {s['requests']}, lost {s['lost']}, late robot ticks {s['late_ticks']}; "
        f"at the end: pending {end['num_pending_requests']}, running {end['num_running_reqs']}, "
        f"KV used {end['kv_pool']['used']}; node cut {end['slow_client_aborts']}"
    )


def plot(path: Path, s: dict[str, Any], title: str) -> None:
    """Robot latency per minute and RSS over time, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, mem) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    minutes = [r["minute"] + 0.5 for r in s["per_minute"]]
    for q in ("p50", "p99"):
        lat.plot(minutes, [r[f"{q}_ms"] for r in s["per_minute"]], "o-", label=q.upper())
    lat.set_ylabel("robot latency [ms]")
    lat.set_yscale("log")
    lat.legend()
    lat.set_title(title)
    for name, samples in s["rss_samples_mb"].items():
        slope = s["rss_slope_mb_per_min"][name]
        label = f"{name} ({slope:+.2f} MB/min)"
        mem.plot([t / 60 for t, _ in samples], [v for _, v in samples], label=label)
    mem.set_xlabel("minute")
    mem.set_ylabel("RSS [MB]")
    mem.legend(fontsize=8)
    for ax in (lat, mem):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(args: argparse.Namespace, **measured: Any) -> dict[str, Any]:
    s = summarise(**measured)
    s["config"] = {k: str(v) for k, v in vars(args).items()}
    _print(s)
    write_json(args.out / "soak.json", s)
    title = f"soak: {args.robots} robots at {args.rate_hz:g} Hz, {args.minutes:g} min, demo VLA"
    plot(args.out / "soak.png", s, title)
    print(f"wrote {args.out}/soak.json and soak.png")
    return s
