"""The recording generator (procedural scene; the aloha scene needs gym-aloha, see tests/data)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from rosbags.highlevel import AnyReader

from ros_bridge.bags import read_frames
from ros_bridge.tools.make_recording import RecordingConfig, generate, parse_args
from ros_bridge.tools.scene_motion import MotionScript

START_NS = 1_600_000_000_000_000_000


def _config(out: Path, **overrides: object) -> RecordingConfig:
    fields = {
        "out": out,
        "frames": 16,
        "rate_hz": 20.0,
        "width": 64,
        "height": 48,
        "storage": "sqlite3",
        "source": "procedural",
        "cameras": ("top", "left"),
        "start_ns": START_NS,
    }
    return RecordingConfig(**(fields | overrides))  # type: ignore[arg-type]


def test_default_holds_and_scene_time() -> None:
    script = MotionScript.with_default_holds(100, 10.0)
    assert script.holds == (range(25, 33), range(60, 72))
    held = {i for i in range(100) if i in range(25, 33) or i in range(60, 72)}
    moved = [sum(1 for j in range(1, i + 1) if j not in held) for i in range(100)]
    assert script.motion_times_s() == pytest.approx([m / 10.0 for m in moved])
    assert MotionScript.with_default_holds(5, 10.0).holds == ()


def test_procedural_jpeg_bag_read_by_rosbags(tmp_path: Path) -> None:
    summary = generate(_config(tmp_path / "bag"))
    holds = MotionScript.with_default_holds(16, 20.0).holds
    assert summary.holds == holds and summary.unique_frames_per_topic == 16 - sum(map(len, holds))
    by_topic: dict[str, list] = {}
    with AnyReader([tmp_path / "bag"]) as reader:
        for conn, recv_ns, raw in reader.messages():
            by_topic.setdefault(conn.topic, []).append(
                (recv_ns, reader.deserialize(raw, conn.msgtype))
            )
    assert sorted(by_topic) == [
        "/camera/left/image_raw/compressed",
        "/camera/top/image_raw/compressed",
    ]
    for messages in by_topic.values():
        stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, m in messages]
        assert stamps == [START_NS + i * 50_000_000 for i in range(16)]
        for index, (_, msg) in enumerate(messages):
            assert Image.open(io.BytesIO(bytes(msg.data))).size == (64, 48)
            same_as_previous = index > 0 and bytes(msg.data) == bytes(messages[index - 1][1].data)
            assert same_as_previous == any(index in hold for hold in holds)


def test_generation_is_deterministic(tmp_path: Path) -> None:
    generate(_config(tmp_path / "a"))
    generate(_config(tmp_path / "b"))
    assert list(read_frames(tmp_path / "a")) == list(read_frames(tmp_path / "b"))


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_raw_rgb8_and_png_formats(tmp_path: Path, storage: str) -> None:
    generate(_config(tmp_path / "raw", image_format="rgb8", storage=storage, frames=3))
    generate(_config(tmp_path / "png", image_format="png", storage=storage, frames=3))
    raw = [f for f in read_frames(tmp_path / "raw") if f.topic == "/camera/top/image_raw"]
    png = list(read_frames(tmp_path / "png", topics=["/camera/top/image_raw/compressed"]))
    for raw_frame, png_frame in zip(raw, png, strict=True):
        assert (raw_frame.encoding, raw_frame.height, raw_frame.width, raw_frame.step) == (
            "rgb8",
            48,
            64,
            192,
        )
        assert png_frame.encoding == "rgb8; png compressed bgr8"
        decoded = np.asarray(Image.open(io.BytesIO(png_frame.data)))
        pixels = np.frombuffer(raw_frame.data, np.uint8).reshape(48, 64, 3)
        np.testing.assert_array_equal(decoded, pixels)  # PNG is lossless: the same image


def test_command_line_arguments(tmp_path: Path) -> None:
    config = parse_args(
        [
            str(tmp_path / "x"),
            "--size",
            "320x240",
            "--cameras",
            "top,angle",
            "--storage",
            "sqlite3",
            "--source",
            "procedural",
            "--rate",
            "15",
        ]
    )
    assert (config.width, config.height, config.cameras) == (320, 240, ("top", "angle"))
    assert (config.storage, config.source, config.rate_hz, config.frames) == (
        "sqlite3",
        "procedural",
        15.0,
        100,
    )


def test_aloha_scene_when_gym_aloha_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("gym_aloha")
    summary = generate(_config(tmp_path / "bag", source="aloha", cameras=("top",), frames=3))
    frames = list(read_frames(tmp_path / "bag"))
    assert summary.unique_frames_per_topic == 3 and len(frames) == 3
    assert len({f.data for f in frames}) == 3  # the arms move between frames
