"""A replay report as a PNG: frame-to-first-action over time, and its distribution."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_report(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a robot or in CI
    import matplotlib.pyplot as plt

    series = report["observed_frame_to_action"]
    times = [p["t_s"] for p in series]
    latencies = [p["ms"] for p in series]
    fig, (over_time, spread) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    over_time.plot(times, latencies, marker=".", linestyle="-", linewidth=0.8)
    over_time.axhline(report["deadline_ms"], color="red", linestyle="--", label="deadline")
    over_time.set(xlabel="replay time (s)", ylabel="frame to first action (ms)")
    over_time.set_title("per processed frame (observed by a subscriber)")
    over_time.legend(loc="upper right")
    if latencies:
        spread.hist(latencies, bins=min(30, max(5, len(latencies) // 2)))
    f2a = report["frame_to_action"]
    for q, style in (("p50_ms", ":"), ("p99_ms", "--")):
        if f2a[q] is not None:
            spread.axvline(f2a[q], color="black", linestyle=style, label=f"node {q[:3].upper()}")
    spread.set(xlabel="frame to first action (ms)", ylabel="frames")
    spread.set_title(
        f"{report['frames_processed']} processed / {report['frames_in']} in, "
        f"{report['deadline_misses']} deadline misses"
    )
    if f2a["p50_ms"] is not None:
        spread.legend(loc="upper right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
