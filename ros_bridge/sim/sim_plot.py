"""A closed-loop report as a PNG: frame-to-action over time, and one joint's commanded
trajectory (the joint with the largest jump) over the whole run and, zoomed in on 4 s around
that jump, with the chunk boundaries and the steps without a fresh action marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ZOOM_S = 4.0


def plot_report(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a robot or in CI
    import matplotlib.pyplot as plt

    fig, (latency, whole, zoom) = plt.subplots(3, 1, figsize=(11, 10), constrained_layout=True)
    chunks = report["chunks"]
    latency.plot(
        [c["stamp_s"] for c in chunks],
        [c["frame_to_action_ms"] for c in chunks],
        marker=".",
        linewidth=0.8,
    )
    latency.axhline(report["deadline_ms"], color="red", linestyle="--", label="deadline")
    latency.set(ylabel="frame to first action (ms)")
    latency.set_title(
        f"{report['executor']}: {report['chunks_received']} chunks "
        f"({report['inference_rate_hz']} Hz), {report['deadline_misses']} deadline misses, "
        f"control {report['control_rate_hz']} Hz"
    )
    latency.legend(loc="upper right")
    _plot_joint(whole, report, None)
    end = report["timeline"]["t_s"][-1]
    start = min(max((report["max_joint_jump_t_s"] or 0.0) - ZOOM_S / 2, 0.0), end - ZOOM_S)
    _plot_joint(zoom, report, (max(start, 0.0), max(start, 0.0) + ZOOM_S))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_joint(axes: Any, report: dict[str, Any], window: tuple[float, float] | None) -> None:
    line = report["timeline"]
    times, values, kinds = line["t_s"], line["values"], line["kind"]
    axes.step(times, values, where="post", linewidth=0.9, label="commanded target")
    if window is not None:
        boundaries = [
            times[i]
            for i in range(1, len(times))
            if kinds[i] == "c" and line["source_s"][i] != line["source_s"][i - 1]
        ]
        for t in boundaries:
            axes.axvline(t, color="grey", linewidth=0.6, alpha=0.7)
        axes.set_xlim(*window)
    held = [(t, v) for t, v, k in zip(times, values, kinds, strict=True) if k != "c"]
    if held:
        axes.plot(*zip(*held, strict=True), "r.", markersize=2, label="no fresh action")
    axes.set(xlabel="time (s)", ylabel=f"{line['joint']} target")
    title = f"{line['joint']}, max joint jump {report['max_joint_jump']:.3f}"
    if window is not None:
        title = f"around the largest jump; grey lines: a newer chunk takes over; {title}"
    axes.set_title(title)
    axes.legend(loc="upper right")
