"""Closed-loop reports side by side: a markdown table and a PNG.

    python -m ros_bridge.sim.sim_compare LABEL=REPORT.json ... [--plot OUT.png]

The table has, per run, what the loop did (actions applied, holds after the first action,
deadline misses, chunks and their rate) and how chunks meet at a switch (`switch_gap_mean`: the
new chunk's plan against the previous one's at the switch instant; the joint step at switches
against the step within chunks; consecutive chunks' disagreement over their overlap). The plot
shows those figures as bars and the actions applied in each second of each run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

COLUMNS = (
    ("actions applied / steps", lambda r: f"{r['actions_applied']} / {r['steps']}"),
    ("holds after the first action", lambda r: str(r["holds_after_first_action"])),
    ("deadline misses", lambda r: str(r["deadline_misses"])),
    ("chunks (rate)", lambda r: f"{r['chunks_received']} ({r['inference_rate_hz']} Hz)"),
    ("min actions / s after the first", lambda r: str(min_after_first(r))),
    ("switch gap", lambda r: _num(r["switch_gap_mean"])),
    (
        "switch jump mean / max",
        lambda r: f"{_num(r['switch_jump_mean'])} / {_num(r['switch_jump_max'])}",
    ),  # fmt: skip
    ("step within chunks", lambda r: _num(r["step_mean"])),
    ("overlap disagreement", lambda r: _num(r["chunk_overlap_mean_abs"])),
    ("action period in use", lambda r: f"{r['action_period_ms_in_use']:.0f} ms"),
)
BARS = ("switch_gap_mean", "switch_jump_mean", "step_mean", "chunk_overlap_mean_abs")


def min_after_first(report: dict[str, Any]) -> int | None:
    """The fewest actions applied in a whole second after the one with the first action."""
    seconds = report["actions_applied_per_second"]
    first = next((i for i, n in enumerate(seconds) if n), None)
    whole = seconds[first + 1 : int(report["seconds"])] if first is not None else []
    return min(whole) if whole else None


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(reports: dict[str, dict[str, Any]]) -> str:
    head = "| run | " + " | ".join(name for name, _ in COLUMNS) + " |"
    rule = "|" + " --- |" * (len(COLUMNS) + 1)
    rows = [
        f"| {label} | " + " | ".join(cell(r) for _, cell in COLUMNS) + " |"
        for label, r in reports.items()
    ]
    return "\n".join([head, rule, *rows])


def plot(reports: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (bars, seconds) = plt.subplots(2, 1, figsize=(10, 8), constrained_layout=True)
    width = 0.8 / len(reports)
    x = np.arange(len(BARS))
    for i, (label, r) in enumerate(reports.items()):
        values = [r[k] if r[k] is not None else 0.0 for k in BARS]
        bars.bar(x + i * width, values, width, label=label)
        seconds.step(range(len(r["actions_applied_per_second"])),
                     r["actions_applied_per_second"], where="post", label=label)  # fmt: skip
    bars.set_xticks(x + width * (len(reports) - 1) / 2, [k.replace("_", " ") for k in BARS])
    bars.set(ylabel="joint units", title="how consecutive chunks meet")
    bars.legend()
    seconds.set(xlabel="second of the run", ylabel="actions applied", title="actions per second")
    seconds.set_ylim(bottom=0)
    seconds.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=REPORT.json")
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    reports = {}
    for run in args.runs:
        label, _, path = run.partition("=")
        reports[label] = json.loads(Path(path).read_text())
    print(table(reports))
    if args.plot:
        plot(reports, args.plot)


if __name__ == "__main__":
    main()
