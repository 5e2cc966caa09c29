"""`python -m vla_server.bench bridge`: its outputs and its arguments, without a server (the
end-to-end run on a live server is in tests/integration/test_bridge_live_server.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ros_bridge import bench_bridge
from vla_server.bench import __main__ as bench_main


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
    argv = ["python -m vla_server.bench", "bridge", "--bag", str(missing), "--frames", frames]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        bench_main.main()
    expected = "--frames must be >= 1" if frames == "0" else f"{missing}; pass --bag PATH"
    assert expected in str(exc.value)


def test_the_default_recording_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_bridge, "DEFAULT_BAG", Path("/nonexistent/aloha"))
    with pytest.raises(SystemExit, match="the default: a source checkout's tests/data"):
        bench_bridge.load_frames(bench_bridge.DEFAULT_BAG, 2)
