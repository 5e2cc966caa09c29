"""`vla-bridge bench`: its outputs and its arguments, without a server (the end-to-end run on a
live server is in tests/integration/test_bridge_live_server.py); and `vla_server.bench control`'s
bridge section, which runs it as a subprocess."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ros_bridge import bench_bridge, cli
from vla_server.bench import __main__ as bench_main
from vla_server.bench import control


def test_report_writes_the_summary_json_and_a_png(tmp_path: Path) -> None:
    samples = {"bridge": [2.0, 4.0, 6.0], "direct": [1.0, 2.0, 3.0]}
    result = bench_bridge.report(samples, tmp_path / "out")
    saved = json.loads((tmp_path / "out/bridge.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert saved["bridge"]["p50"] == pytest.approx(4.0) and saved["direct"]["p50"] == 2.0
    assert saved["ratio_p50"] == pytest.approx(2.0) and saved["ratio_p99"] == pytest.approx(2.0)
    assert saved["overhead_p50_ms"] == pytest.approx(2.0) and saved["frames"] == 3
    assert saved["samples_ms"] == samples
    assert (tmp_path / "out/bridge.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("frames", ["2", "0"])
def test_a_missing_recording_or_no_frames_fails_before_any_server_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, frames: str
) -> None:
    def no_server(*_: object, **__: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(bench_bridge, "bench", no_server)
    missing = tmp_path / "no_such_bag"
    argv = ["vla-bridge", "bench", "--bag", str(missing), "--frames", frames]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    expected = "--frames must be >= 1" if frames == "0" else f"{missing}; pass --bag PATH"
    assert expected in str(exc.value)


def test_the_default_recording_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_bridge, "DEFAULT_BAG", Path("/nonexistent/aloha"))
    with pytest.raises(SystemExit, match="the default: a source checkout's tests/data"):
        bench_bridge.load_frames(bench_bridge.DEFAULT_BAG, 2)


def test_omitted_flags_are_the_default_recording_and_settings(monkeypatch, tmp_path) -> None:
    seen = {}
    monkeypatch.setattr(bench_bridge, "load_frames", lambda bag, n: seen.update(bag=bag, n=n) or [])
    monkeypatch.setattr(bench_bridge, "bench", lambda url, frames, s: seen.update(settings=s) or {})
    monkeypatch.setattr(bench_bridge, "report", lambda samples, out: {})
    cli.main(["bench", "--server-url", "http://127.0.0.1:9", "--out", str(tmp_path)])
    assert seen == {
        "bag": bench_bridge.DEFAULT_BAG,
        "n": 20,
        "settings": bench_bridge.DEFAULT_SETTINGS,
    }
    cli.main(
        ["bench", "--server-url", "u", "--unnorm-key", "k", "--num-actions", "0", "--frames", "3"]
    )
    assert (seen["settings"].unnorm_key, seen["settings"].num_actions, seen["n"]) == ("k", 0, 3)


def test_the_old_server_bench_name_points_at_vla_bridge_bench() -> None:
    with pytest.raises(SystemExit, match="`vla-bridge bench` now"):
        bench_main.main(["bridge", "--frames", "2"])


# Stands in for `vla-bridge bench`: writes the bridge.json its --out names, as the real one does.
FAKE_BENCH = """
import json, pathlib, sys
out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
out.mkdir(parents=True)
frames = int(sys.argv[sys.argv.index("--frames") + 1])
(out / "bridge.json").write_text(json.dumps({"ratio_p50": 1.02, "frames": frames}))
"""


def test_control_runs_the_bridge_bench_as_a_subprocess_and_reads_its_json(monkeypatch, tmp_path):
    monkeypatch.setattr(control, "BRIDGE_BENCH", (sys.executable, "-c", FAKE_BENCH))
    rows, result = control.bridge(argparse.Namespace(quick=True, out=tmp_path))
    assert result == {"ratio_p50": 1.02, "frames": 10}
    assert [(r["metric"], r["value"], r["met"]) for r in rows] == [
        ("bridge / direct P50", 1.02, "met")
    ]


def test_control_stops_before_any_section_when_the_bridge_bench_cannot_run(monkeypatch):
    refusal = "import sys; sys.exit('vla-bridge bench needs the [ros] extra (rosbags ...)')"
    monkeypatch.setattr(control, "BRIDGE_BENCH", (sys.executable, "-c", refusal))
    monkeypatch.setattr(control, "SECTIONS", {"bridge": None})  # never reached
    args = argparse.Namespace(sections=["bridge"], out=Path("unused"))
    with pytest.raises(SystemExit, match=r"bridge section: vla-bridge bench needs the \[ros\]"):
        control.run(args)


def test_the_real_bridge_bench_command_answers_help() -> None:
    """What check_bridge_bench runs, here where the [ros] extra is installed."""
    done = subprocess.run([*control.BRIDGE_BENCH, "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--server-url" in done.stdout and "--frames" in done.stdout
