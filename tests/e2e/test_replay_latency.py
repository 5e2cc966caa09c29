"""Latency regression: the recorded camera stream through the bridge against a live server.

The committed recording (100 JPEG frames at 10 Hz from gym-aloha) is replayed at its recorded
pace through VlaBridgeNode (shim, in-process transport) against `vla-server serve` on the demo
model. Latencies are judged relative to the raw model step measured in the same run, on the
same machine: the median time from a compressed frame in hand to its first action for a direct
request (caches flushed), never in absolute milliseconds. The deadline is set to
`deadline_in_raw_steps` raw steps; the test fails when frame-to-action P99 (in raw steps) or
the fraction of frames missing the deadline regress past the checked-in baseline.

The report (JSON) and a plot (PNG) are written to the test's tmp folder, and also to
$VLA_BRIDGE_REPORT_DIR when it is set.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import pytest

from ros_bridge.bench_bridge import direct_first_action_ms, distinct_frames, flush_cache
from ros_bridge.replay import ReplayConfig, run_replay, write_report
from ros_bridge.replay_plot import plot_report
from tests.support.paths import BAG
from tests.support.server import run_server

BASELINE = Path(__file__).with_name("bridge_replay_baseline.json")
RAW_STEP_FRAMES = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with run_server(None, tmp_path_factory.mktemp("server")) as s:
        yield s


@pytest.fixture(scope="module")
def replay(server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    baseline = json.loads(BASELINE.read_text())
    frames = distinct_frames(BAG, RAW_STEP_FRAMES + 1)
    direct_first_action_ms(server.url, frames[:1])  # warm-up: first-call costs
    raw_step_ms = statistics.median(direct_first_action_ms(server.url, frames[1:]))
    deadline_ms = baseline["deadline_in_raw_steps"] * raw_step_ms
    flush_cache(server.url)
    params = {
        "unnorm_key": "aloha_left",
        "num_actions": baseline["num_actions"],
        "deadline_ms": deadline_ms,
    }
    report = run_replay(ReplayConfig(BAG, server.url, rate=1.0, params=params))
    report["raw_step_ms"] = raw_step_ms
    report["relative"] = relative_figures(report)
    report["baseline"] = baseline
    out = tmp_path_factory.mktemp("bridge_replay")
    write_report(report, out / "report.json")
    plot_report(report, out / "latency.png")
    copy_to = os.environ.get("VLA_BRIDGE_REPORT_DIR")
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        for name in ("report.json", "latency.png"):
            shutil.copy(out / name, Path(copy_to) / name)
    report["_paths"] = {"json": out / "report.json", "png": out / "latency.png"}
    return report


def relative_figures(report: dict) -> dict:
    raw = report["raw_step_ms"]
    f2a = report["frame_to_action"]
    return {
        "frame_to_action_p50_in_raw_steps": f2a["p50_ms"] / raw,
        "frame_to_action_p99_in_raw_steps": f2a["p99_ms"] / raw,
        "deadline_miss_fraction": report["deadline_misses"] / report["frames_in"],
    }


def test_report_is_complete_and_readable(replay: dict) -> None:
    saved = json.loads(replay["_paths"]["json"].read_text())
    for key in (
        "frames_in",
        "frames_processed",
        "frames_superseded",
        "frames_dropped_bad",
        "frames_expired",
        "actions_published",
        "deadline_misses",
        "diagnostic_levels_seen",
        "raw_step_ms",
    ):
        assert key in saved
    for metric in ("ttft", "itl", "frame_to_action", "time_to_first_action"):
        assert saved[metric]["p50_ms"] is not None and saved[metric]["p99_ms"] is not None
    assert replay["_paths"]["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert saved["drained"] and saved["frames_in"] == saved["frames_published"] == 100


def test_every_frame_is_accounted_for(replay: dict) -> None:
    r = replay
    assert r["frames_dropped_bad"] == 0 and r["frames_failed"] == 0
    # expired: the server ended the frame at its deadline (it could not make it any more)
    ended = ("frames_processed", "frames_superseded", "frames_stale", "frames_expired")
    assert sum(r[k] for k in ended) == r["frames_in"]
    assert r["frames_processed"] > 0


def test_one_action_stream_per_processed_frame_stamped_with_its_stamp(replay: dict) -> None:
    r, n = replay, replay["baseline"]["num_actions"]
    # The observer only counts commands whose stamp is the stamp of a frame the player sent.
    per_stream = [s["actions"] for s in r["observed_frame_to_action"]]
    assert len(per_stream) == r["action_streams"] and max(per_stream) <= n
    assert per_stream.count(n) == r["frames_processed"]
    # a frame the server ended at its deadline may have published some of its actions; one
    # whose first action came too late has its on_late command (same stamp) and none of them
    assert len(per_stream) - per_stream.count(n) <= r["frames_expired"]
    assert r["actions_published"] + r["late_commands"] == sum(per_stream)
    assert r["other_commands"] == 0


def test_no_regression_against_the_baseline(replay: dict) -> None:
    base, now = replay["baseline"], replay["relative"]
    tolerance = base["tolerance"]
    limit = base["frame_to_action_p99_in_raw_steps"] * (1 + tolerance["p99_relative"])
    assert now["frame_to_action_p99_in_raw_steps"] <= limit, (
        f"frame-to-action P99 {now['frame_to_action_p99_in_raw_steps']:.2f} raw steps > "
        f"{limit:.2f} (baseline {base['frame_to_action_p99_in_raw_steps']:.2f}); "
        f"report: {replay['_paths']['json']}"
    )
    miss_limit = base["deadline_miss_fraction"] + tolerance["miss_fraction_absolute"]
    assert now["deadline_miss_fraction"] <= miss_limit, (
        f"deadline misses {now['deadline_miss_fraction']:.1%} of frames > {miss_limit:.1%}; "
        f"report: {replay['_paths']['json']}"
    )
