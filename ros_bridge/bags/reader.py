"""Reading camera frames out of rosbag2 folders (mcap or sqlite3 storage)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rosbags.rosbag2 import Reader

from ros_bridge.bags.messages import jazzy_typestore
from ros_bridge.camera_frame import CAMERA_MSGTYPES, CameraFrame, frame_from_msg


@dataclass(frozen=True, slots=True)
class TopicSummary:
    topic: str
    msgtype: str
    count: int


@dataclass(frozen=True, slots=True)
class BagSummary:
    path: Path
    storage: str  # "mcap" or "sqlite3"
    topics: tuple[TopicSummary, ...]
    start_ns: int
    end_ns: int  # one past the last receive time (rosbags counts it that way)

    @property
    def camera_topics(self) -> list[str]:
        return [t.topic for t in self.topics if t.msgtype in CAMERA_MSGTYPES]


def describe_bag(path: str | Path) -> BagSummary:
    """What a bag holds, from its metadata (no message is read)."""
    with Reader(path) as reader:
        counts: dict[str, int] = {}
        for conn in reader.connections:
            counts[conn.topic] = counts.get(conn.topic, 0) + conn.msgcount
        msgtypes = {conn.topic: conn.msgtype for conn in reader.connections}
        return BagSummary(
            path=Path(path),
            storage=_storage_of(Path(path)),
            topics=tuple(TopicSummary(t, msgtypes[t], counts[t]) for t in sorted(counts)),
            start_ns=reader.start_time,
            end_ns=reader.end_time,
        )


def read_frames(path: str | Path, topics: Sequence[str] | None = None) -> Iterator[CameraFrame]:
    """Yields the camera frames of a bag in receive-time order across topics.

    `topics=None` reads every Image/CompressedImage topic; other message types are skipped.
    Asking for a topic the bag lacks (or that is not a camera topic) raises ValueError.
    """
    typestore = jazzy_typestore()
    with Reader(path) as reader:
        cameras = [c for c in reader.connections if c.msgtype in CAMERA_MSGTYPES]
        if topics is not None:
            missing = set(topics) - {c.topic for c in cameras}
            if missing:
                have = sorted({c.topic for c in cameras})
                raise ValueError(f"no camera topic {sorted(missing)} in {path}; it has {have}")
            cameras = [c for c in cameras if c.topic in topics]
        if not cameras:  # rosbags reads every connection when given none
            return
        for conn, recv_ns, raw in reader.messages(connections=cameras):
            msg = typestore.deserialize_cdr(raw, conn.msgtype)
            yield frame_from_msg(conn.topic, msg, recv_ns)


def _storage_of(path: Path) -> str:
    files = list(path.iterdir()) if path.is_dir() else [path]
    return "mcap" if any(f.suffix == ".mcap" for f in files) else "sqlite3"
