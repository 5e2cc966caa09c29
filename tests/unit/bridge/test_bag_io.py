"""rosbag2 camera I/O (ros_bridge.bags) checked against rosbags' own writer/reader and PIL."""

from __future__ import annotations

import array
import hashlib
import io
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from ros_bridge.bags import BagRecorder, describe_bag, paced, read_frames
from ros_bridge.camera_frame import CameraFrame, compressed_frame, frame_from_msg, raw_frame

STORAGES = ["mcap", "sqlite3"]
DATA = Path(__file__).resolve().parents[2] / "data"
RECORDING = DATA / "aloha_transfer_cube_10hz"
BASE_NS = 1_700_000_000_123_456_789


def _encoded(pixels: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return buf.getvalue()


def _camera_frames() -> list[CameraFrame]:
    """Five cameras (rgb8, bgr8, mono8, JPEG, PNG), 3 frames each, interleaved in receive time."""
    rng = np.random.default_rng(7)
    frames = []
    for i in range(3):
        stamp = BASE_NS + i * 33_333_333
        rgb = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
        frames += [
            raw_frame("/cam/rgb", stamp, rgb, "rgb8", recv_ns=stamp + 10, frame_id="rgb_opt"),
            raw_frame("/cam/bgr", stamp, rgb[..., ::-1], "bgr8", recv_ns=stamp + 20),
            raw_frame("/cam/mono", stamp, rgb[..., 0], "mono8", recv_ns=stamp + 30),
            compressed_frame(
                "/cam/jpeg/compressed",
                stamp,
                _encoded(rgb, "JPEG"),
                "rgb8; jpeg compressed bgr8",
                recv_ns=stamp + 40,
            ),
            compressed_frame(
                "/cam/png/compressed",
                stamp,
                _encoded(rgb, "PNG"),
                "png",
                recv_ns=stamp + 50,
                frame_id="png_opt",
            ),
        ]
    return frames


def _record(path: Path, frames: list[CameraFrame], storage: str) -> None:
    with BagRecorder(path, storage) as recorder:
        for frame in frames:
            recorder.write(frame)


@pytest.mark.parametrize("storage", STORAGES)
def test_round_trip_keeps_every_field(tmp_path: Path, storage: str) -> None:
    frames = _camera_frames()
    _record(tmp_path / "bag", frames, storage)
    assert list(read_frames(tmp_path / "bag")) == frames
    summary = describe_bag(tmp_path / "bag")
    assert summary.storage == storage
    assert {t.topic: t.count for t in summary.topics} == {f.topic: 3 for f in frames}
    assert summary.start_ns == frames[0].recv_ns


@pytest.mark.parametrize("storage", STORAGES)
def test_rosbags_anyreader_reads_our_bags(tmp_path: Path, storage: str) -> None:
    frames = _camera_frames()
    _record(tmp_path / "bag", frames, storage)
    with AnyReader([tmp_path / "bag"]) as reader:
        decoded = [(c, t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]
    assert len(decoded) == len(frames)
    for (conn, recv_ns, msg), frame in zip(decoded, frames, strict=True):
        assert (conn.topic, recv_ns, msg.header.frame_id) == (
            frame.topic,
            frame.recv_ns,
            frame.frame_id,
        )
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == frame.stamp_ns
        assert bytes(msg.data) == frame.data
        if frame.compressed:
            assert conn.msgtype == "sensor_msgs/msg/CompressedImage"
            assert msg.format == frame.encoding
        else:
            assert conn.msgtype == "sensor_msgs/msg/Image"
            assert (msg.height, msg.width, msg.step, msg.encoding) == (
                frame.height,
                frame.width,
                frame.step,
                frame.encoding,
            )
            assert msg.step * msg.height == len(msg.data)


@pytest.mark.parametrize("storage", STORAGES)
def test_reads_bags_written_by_rosbags_itself(tmp_path: Path, storage: str) -> None:
    ts = get_typestore(Stores.ROS2_HUMBLE)  # a different store than ours, same wire format
    types = ts.types
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8)
    with Writer(tmp_path / "bag", version=8, storage_plugin=plugin) as writer:
        image = writer.add_connection("/img", "sensor_msgs/msg/Image", typestore=ts)
        text = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=ts)
        header = types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=12, nanosec=345), frame_id="f"
        )
        msg = types["sensor_msgs/msg/Image"](
            header=header, height=2, width=3, encoding="rgb8", is_bigendian=0, step=9, data=pixels
        )
        writer.write(
            text,
            5,
            ts.serialize_cdr(types["std_msgs/msg/String"](data="hi"), "std_msgs/msg/String"),
        )
        writer.write(image, 7, ts.serialize_cdr(msg, "sensor_msgs/msg/Image"))
    (frame,) = read_frames(tmp_path / "bag")
    assert frame == CameraFrame(
        topic="/img",
        recv_ns=7,
        stamp_ns=12 * 10**9 + 345,
        frame_id="f",
        encoding="rgb8",
        height=2,
        width=3,
        step=9,
        data=pixels.tobytes(),
        compressed=False,
    )
    assert describe_bag(tmp_path / "bag").camera_topics == ["/img"]


@pytest.mark.parametrize("storage", STORAGES)
def test_frames_come_out_in_receive_order_across_topics(tmp_path: Path, storage: str) -> None:
    left = [compressed_frame("/left", BASE_NS + t, b"L%d" % t, "jpeg") for t in (0, 100, 200)]
    right = [compressed_frame("/right", BASE_NS + t, b"R%d" % t, "jpeg") for t in (50, 150, 250)]
    _record(tmp_path / "bag", left + right, storage)  # written topic by topic, not in time order
    got = list(read_frames(tmp_path / "bag"))
    assert [f.data for f in got] == [b"L0", b"R50", b"L100", b"R150", b"L200", b"R250"]
    assert list(read_frames(tmp_path / "bag", topics=["/right"])) == right
    with pytest.raises(ValueError, match="/nope"):
        list(read_frames(tmp_path / "bag", topics=["/right", "/nope"]))


def test_recorder_refuses_two_types_on_one_topic(tmp_path: Path) -> None:
    with BagRecorder(tmp_path / "bag") as recorder:
        recorder.write(compressed_frame("/cam", 1, b"x", "jpeg"))
        with pytest.raises(ValueError, match="CompressedImage"):
            recorder.write(raw_frame("/cam", 2, np.zeros((1, 1), np.uint8), "mono8"))
    assert recorder.frames_written == 1


def test_frame_from_any_message_with_ros_field_names() -> None:
    stamp = SimpleNamespace(sec=1_700_000_000, nanosec=999_999_999)
    header = SimpleNamespace(stamp=stamp, frame_id="cam")
    raw = SimpleNamespace(
        header=header,
        height=1,
        width=2,
        encoding="mono8",
        is_bigendian=0,
        step=2,
        data=array.array("B", [3, 4]),
    )
    frame = frame_from_msg("/t", raw, recv_ns=5)
    assert (frame.data, frame.step, frame.compressed) == (b"\x03\x04", 2, False)
    assert frame.stamp == (1_700_000_000, 999_999_999)
    jpeg = SimpleNamespace(header=header, format="jpeg", data=[255, 216])
    assert frame_from_msg("/c", jpeg, recv_ns=6).data == b"\xff\xd8"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _frames_at(offsets_ms: list[int]) -> list[CameraFrame]:
    return [compressed_frame("/c", BASE_NS + ms * 10**6, b"", "jpeg") for ms in offsets_ms]


def test_pacing_releases_each_frame_at_offset_over_rate() -> None:
    clock = FakeClock()
    out = list(paced(_frames_at([0, 100, 150, 400]), rate=2.0, clock=clock, sleep=clock.sleep))
    expected_due = [100.0, 100.05, 100.075, 100.2]
    assert [p.due_s for p in out] == pytest.approx(expected_due)
    assert [p.released_s for p in out] == pytest.approx(expected_due)
    assert [p.lateness_s for p in out] == [0.0] * 4
    assert clock.sleeps == pytest.approx([0.05, 0.025, 0.125])


def test_pacing_counts_lateness_when_the_consumer_is_slow() -> None:
    clock = FakeClock()
    lateness = []
    for item in paced(_frames_at([0, 100, 150, 400]), rate=2.0, clock=clock, sleep=clock.sleep):
        lateness.append(item.lateness_s)
        clock.now += 0.1  # the consumer holds every frame for 100 ms
    # released at 100.0, 100.1, 100.2, 100.3 against due 100.0, 100.05, 100.075, 100.2
    assert lateness == pytest.approx([0.0, 0.05, 0.125, 0.1])
    assert clock.sleeps == []


def test_pacing_as_fast_as_possible_and_bad_rates() -> None:
    clock = FakeClock()
    out = list(paced(_frames_at([0, 500, 900]), rate=math.inf, clock=clock, sleep=clock.sleep))
    assert clock.sleeps == [] and [p.due_s for p in out] == [100.0] * 3
    for rate in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError):
            next(paced(_frames_at([0]), rate=rate))


def test_pacing_on_the_real_clock_at_a_high_rate_multiplier() -> None:
    frames = [
        compressed_frame(f"/cam{i % 2}", BASE_NS + i * 10**8, b"%d" % i, "jpeg") for i in range(50)
    ]  # 10 Hz, two topics
    out = list(paced(frames, rate=1000.0))
    assert [p.frame for p in out] == frames
    start = out[0].due_s
    for i, item in enumerate(out):
        assert item.due_s == pytest.approx(start + i * 0.1 / 1000.0)
        assert item.released_s >= item.due_s
        assert item.lateness_s == pytest.approx(item.released_s - item.due_s)
    assert all(a.released_s <= b.released_s for a, b in zip(out, out[1:], strict=False))


# The committed recording: figures from tests/data/README.md.
RECORDING_FRAMES, RECORDING_RATE_HZ = 100, 10.0
RECORDING_START_NS = 1_735_689_600_000_000_000
RECORDING_TOPIC = "/camera/top/image_raw/compressed"
REPEATED_RUNS = [(24, 32), (59, 71)]  # inclusive frame ranges whose JPEG bytes are identical


def test_committed_recording_matches_its_readme() -> None:
    readme = (DATA / "README.md").read_text()
    mcap = RECORDING / f"{RECORDING.name}.mcap"
    assert hashlib.sha256(mcap.read_bytes()).hexdigest() in readme
    payload = hashlib.sha256()
    with AnyReader([RECORDING]) as reader:
        assert [c.topic for c in reader.connections] == [RECORDING_TOPIC]
        for conn, _, raw in reader.messages():
            payload.update(bytes(reader.deserialize(raw, conn.msgtype).data))
    assert payload.hexdigest() in readme


def test_committed_recording_frames_rate_and_jpegs() -> None:
    frames = list(read_frames(RECORDING))
    assert len(frames) == RECORDING_FRAMES
    period_ns = round(1e9 / RECORDING_RATE_HZ)
    assert [f.stamp_ns for f in frames] == [
        RECORDING_START_NS + i * period_ns for i in range(RECORDING_FRAMES)
    ]
    assert {(f.topic, f.encoding, f.recv_ns - f.stamp_ns) for f in frames} == {
        (RECORDING_TOPIC, "rgb8; jpeg compressed bgr8", 1_000_000)
    }
    for frame in frames:
        image = Image.open(io.BytesIO(frame.data))
        assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (640, 480))
        assert np.asarray(image).shape == (480, 640, 3)
    runs, start = [], 0
    for i in range(1, len(frames) + 1):
        if i == len(frames) or frames[i].data != frames[start].data:
            if i - 1 > start:
                runs.append((start, i - 1))
            start = i
    assert runs == REPEATED_RUNS
    assert len({f.data for f in frames}) == RECORDING_FRAMES - sum(b - a for a, b in runs)
