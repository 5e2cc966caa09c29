"""Tables, plots and the operator profile of `bench pi` (`cli.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vla_harness.stats import plot_distributions, table


def report(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for phases in result["phases"]:
        print_phases(phases)
    if result["phases"]:
        plot_phases(out / "pi-phases.png", result["phases"])
        (out / "pi-top-ops.md").write_text(profile_markdown(result["phases"]))
    series: dict[str, list[float]] = {}
    for served in result["served"]:
        print(f"\n{served['kind']} served, one robot (time to chunk P50) vs the reference:")
        print(table(served["one_robot"], list(served["one_robot"][0])))
        for rows in (served.get("vs_lerobot"), served.get("fleet")):
            if rows:
                print(table(rows, list(rows[0])))
        series[f"{served['kind']} node"] = served["node_s"]
        for n, values in served["reference_s"].items():
            series[f"{served['kind']} reference, {n} thread(s)"] = values
        for n, timed in served.get("lerobot", {}).get("by_threads", {}).items():
            series[f"{served['kind']} LeRobot, {n} thread(s)"] = timed["totals_s"]
    if series:
        title = "served time to chunk (node) vs the reference in process"
        plot_distributions(out / "pi-served.png", title, series)


def print_phases(result: dict[str, Any]) -> None:
    for n, timed in result["by_threads"].items():
        print(f"\n{result['kind']} ({Path(result['folder']).name}), {n} torch thread(s); "
              f"chunks differ by at most {timed['max_chunk_difference']:.2e}")  # fmt: skip
        print(table(timed["rows"], list(timed["rows"][0])))
    b = result["batched_pass"]
    print(f"{result['kind']}: one action-head pass, {b['threads']} thread(s): 1 robot "
          f"{b['pass_ms_one']:.1f} ms, {b['rows']} robots {b['pass_ms_batched']:.1f} ms "
          f"({b['per_row_ms_batched']:.1f} ms per robot)")  # fmt: skip


def profile_markdown(results: list[dict[str, Any]]) -> str:
    """Each kind's, path's and phase's top operators (self CPU time of one observation), and
    those of the node's batched action-head pass."""
    lines = ["# Top operators per phase (`python -m vla_server.bench pi`)", ""]
    for result in results:
        kind, b = result["kind"], result["batched_pass"]
        threads = result.get("profile_threads", b["threads"])
        for path, phases in result["top_operators"].items():
            for phase, ops in phases.items():
                lines += _ops_table(f"{kind}, {path}, {phase} ({threads} thr.)", ops)
        title = f"{kind}, node, one action-head pass over {b['rows']} robots ({b['threads']} thr.)"
        lines += _ops_table(title, b["top_operators"])
    return "\n".join(lines)


def _ops_table(title: str, ops: list[dict[str, Any]]) -> list[str]:
    rows = [f"| `{o['op']}` | {o['self_ms']:.2f} | {o['calls']} |" for o in ops]
    return [f"## {title}", "", "| operator | self ms | calls |", "|---|---|---|", *rows, ""]


def plot_phases(path: Path, results: list[dict[str, Any]]) -> None:
    """Per kind and thread count: each phase's P50, node beside transformers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(r, n) for r in results for n in r["by_threads"]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, (result, n) in zip(axes[0], panels, strict=True):
        rows = [r for r in result["by_threads"][n]["rows"] if r["phase"] != "total"]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r["node_ms"] for r in rows], 0.4, label="node")
        ax.bar([i + 0.2 for i in x], [r["transformers_ms"] for r in rows], 0.4,
               label="transformers")  # fmt: skip
        for i, r in zip(x, rows, strict=True):
            ax.annotate(f"{r['ratio']:.2f}x", (i, max(r["node_ms"], r["transformers_ms"])),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
        ax.set_xticks(list(x), [r["phase"] for r in rows])
        ax.set_ylabel("P50 per observation [ms]")
        ax.set_title(f"{result['kind']}, {n} thread(s)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
