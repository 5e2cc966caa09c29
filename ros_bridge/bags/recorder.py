"""Appending camera frames to a new rosbag2 folder."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.writer import Connection

from ros_bridge.bags.messages import frame_to_msg, jazzy_typestore
from ros_bridge.camera_frame import CameraFrame

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
BAG_VERSION = 9  # the rosbag2 metadata version Jazzy writes


class BagRecorder:
    """Writes CameraFrames to a rosbag2 bag (Jazzy types, CDR), one connection per topic.

    Frames should arrive in receive-time order, as they do from a live subscription.
    Use as a context manager, or call `close()`: the bag is only valid once closed.
    """

    def __init__(self, path: str | Path, storage: str = "mcap") -> None:
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {sorted(STORAGES)}, got {storage!r}")
        self.path = Path(path)
        self.frames_written = 0
        self._typestore = jazzy_typestore()
        self._writer = Writer(self.path, version=BAG_VERSION, storage_plugin=STORAGES[storage])
        self._writer.open()
        self._connections: dict[str, Connection] = {}

    def write(self, frame: CameraFrame) -> None:
        conn = self._connection(frame.topic, frame.msgtype)
        raw = self._typestore.serialize_cdr(frame_to_msg(frame, self._typestore), frame.msgtype)
        self._writer.write(conn, frame.recv_ns, raw)
        self.frames_written += 1

    def write_cdr(self, topic: str, msgtype: str, raw: bytes, recv_ns: int) -> None:
        """Any other message, already serialized (CDR with its encapsulation header, as
        rclpy.serialization.serialize_message gives it)."""
        self._writer.write(self._connection(topic, msgtype), recv_ns, raw)

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> BagRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _connection(self, topic: str, msgtype: str) -> Connection:
        conn = self._connections.get(topic)
        if conn is None:
            conn = self._writer.add_connection(topic, msgtype, typestore=self._typestore)
            self._connections[topic] = conn
        elif conn.msgtype != msgtype:
            raise ValueError(f"topic {topic} carries {conn.msgtype}, cannot add a {msgtype}")
        return conn
