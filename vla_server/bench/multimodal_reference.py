"""A family's own way of running a checkpoint (`PolicyFamily.reference_predict`), next to the
node in `bench multimodal`.

The reference runs in one process, no server, no batching, no cache between requests (the
family's own generate loop, as its authors ship it). It runs on the frames and prompts the node
was measured on, and each of its requests is timed inside that process, so the ratio compares
model work with model work plus the node's HTTP and IPC.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vla_harness.stats import summary_ms
from vla_server.bench.stream_client import StreamTiming

REFERENCE_COLUMNS = [
    "case",
    "n",
    "node_ttfa_p50",
    "reference_p50",
    "ratio_p50",
    "node_ttfa_p99",
    "reference_p99",
    "ratio_p99",
    "tokens_equal",
]


def reference_rounds(
    reference_predict: Callable[..., Any],
    path: Path,
    frames: list[str],
    key: str | None,
    cases: dict[str, str],
    served: dict[str, list[StreamTiming]],
    threads: int,
) -> list[dict[str, Any]]:
    """One row per case (`cases`: case -> instruction, in the order each frame was served): the
    node's time to first action and the reference's (on as many CPU threads as the node's
    model), and on how many requests the node's action tokens equal the reference's."""
    requests = [
        {"image_png_b64": frame, "instruction": instruction, "unnorm_key": key}
        for frame in frames
        for instruction in cases.values()
    ]
    print(f"reference: {len(requests)} requests, {threads} threads ...")
    results = reference_predict(path, requests, threads=threads)
    rows = []
    for i, case in enumerate(cases):
        timings = served[case]
        ours = summary_ms([t.actions_at[0] for t in timings if t.actions_at])
        seconds = [r["first_action_ms"] / 1000 for r in results[i :: len(cases)]]
        theirs = summary_ms(seconds)
        equal = sum(
            t.output_ids[: len(r["token_ids"])] == r["token_ids"]
            for t, r in zip(timings, results[i :: len(cases)], strict=True)
        )
        rows.append(
            {
                "case": case,
                "n": len(timings),
                **{f"node_ttfa_{q}": ours[q] for q in ("p50", "p99")},
                **{f"reference_{q}": theirs[q] for q in ("p50", "p99")},
                **{f"ratio_{q}": theirs[q] / ours[q] for q in ("p50", "p99")},
                "tokens_equal": f"{equal}/{len(timings)}",
                "reference_s": seconds,  # for the plot
            }
        )
    return rows
