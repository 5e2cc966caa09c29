"""Percentiles, tables and plots shared by the benchmarks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pct(values: Sequence[float], q: float) -> float:
    return (
        float(np.percentile(np.asarray(values, dtype=np.float64), q))
        if len(values)
        else float("nan")
    )


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    """P50/P90/P99/mean of durations given in seconds, in milliseconds."""
    return {
        "p50": pct(values, 50) * 1e3,
        "p90": pct(values, 90) * 1e3,
        "p99": pct(values, 99) * 1e3,
        "mean": float(np.mean(values)) * 1e3 if len(values) else float("nan"),
        "n": len(values),
    }


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def plot_distributions(path: Path, title: str, series: dict[str, Sequence[float]]) -> None:
    """Empirical CDFs of several latency samples (seconds) on one log-x axis, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, values in series.items():
        if len(values) == 0:
            continue
        v = np.sort(np.asarray(values) * 1e3)
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=f"{name} (p99 {pct(v, 99):.2f} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("latency [ms]")
    ax.set_ylabel("fraction of samples")
    ax.axhline(0.99, color="grey", lw=0.6, ls="--")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
