"""One camera message as the bridge sees it, and its conversion to and from ROS 2 messages."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

IMAGE_MSGTYPE = "sensor_msgs/msg/Image"
COMPRESSED_MSGTYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_MSGTYPES = (IMAGE_MSGTYPE, COMPRESSED_MSGTYPE)
NS_PER_S = 1_000_000_000


@cache
def jazzy_typestore() -> Typestore:
    """The ROS 2 Jazzy message definitions (building them costs ~0.2 s, so once per process)."""
    return get_typestore(Stores.ROS2_JAZZY)


@dataclass(frozen=True, slots=True)
class CameraFrame:
    """A `sensor_msgs/Image` or `sensor_msgs/CompressedImage`, flattened, data kept as sent.

    Compressed payloads are never decoded here (the bridge decodes), so `height`, `width` and
    `step` are 0 for them and `encoding` holds the CompressedImage `format` string.
    """

    topic: str
    recv_ns: int  # when the message was received (the bag's log time)
    stamp_ns: int  # header.stamp: when the camera took the picture
    frame_id: str
    encoding: str
    height: int
    width: int
    step: int
    data: bytes
    compressed: bool
    is_bigendian: int = 0

    @property
    def msgtype(self) -> str:
        return COMPRESSED_MSGTYPE if self.compressed else IMAGE_MSGTYPE

    @property
    def stamp(self) -> tuple[int, int]:
        """header.stamp as ROS 2's (sec, nanosec)."""
        return divmod(self.stamp_ns, NS_PER_S)


def frame_from_msg(topic: str, msg: Any, recv_ns: int) -> CameraFrame:
    """Flattens any object with ROS 2's Image or CompressedImage field names.

    Duck-typed so rosbags' dataclasses, the shim's messages and real rclpy messages all work.
    """
    stamp = msg.header.stamp
    common = {
        "topic": topic,
        "recv_ns": recv_ns,
        "stamp_ns": stamp.sec * NS_PER_S + stamp.nanosec,
        "frame_id": msg.header.frame_id,
        "data": bytes(msg.data),
    }
    if hasattr(msg, "format"):
        return CameraFrame(
            encoding=msg.format, height=0, width=0, step=0, compressed=True, **common
        )
    return CameraFrame(
        encoding=msg.encoding,
        height=msg.height,
        width=msg.width,
        step=msg.step,
        compressed=False,
        is_bigendian=msg.is_bigendian,
        **common,
    )


def frame_to_msg(frame: CameraFrame, typestore: Typestore | None = None) -> Any:
    """The rosbags message object for `frame` (the inverse of `frame_from_msg`)."""
    types = (typestore or jazzy_typestore()).types
    sec, nanosec = frame.stamp
    header = types["std_msgs/msg/Header"](
        stamp=types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
        frame_id=frame.frame_id,
    )
    data = np.frombuffer(frame.data, dtype=np.uint8)
    if frame.compressed:
        return types[COMPRESSED_MSGTYPE](header=header, format=frame.encoding, data=data)
    return types[IMAGE_MSGTYPE](
        header=header,
        height=frame.height,
        width=frame.width,
        encoding=frame.encoding,
        is_bigendian=frame.is_bigendian,
        step=frame.step,
        data=data,
    )


def raw_frame(
    topic: str,
    stamp_ns: int,
    pixels: np.ndarray,
    encoding: str,
    *,
    recv_ns: int | None = None,
    frame_id: str = "",
) -> CameraFrame:
    """A raw-Image frame from an (H, W) or (H, W, C) uint8 array (rows packed, no padding)."""
    if pixels.dtype != np.uint8:
        raise ValueError(f"expected uint8 pixels, got {pixels.dtype}")
    height, width = pixels.shape[:2]
    channels = pixels.shape[2] if pixels.ndim == 3 else 1
    return CameraFrame(
        topic=topic,
        recv_ns=stamp_ns if recv_ns is None else recv_ns,
        stamp_ns=stamp_ns,
        frame_id=frame_id,
        encoding=encoding,
        height=height,
        width=width,
        step=width * channels,
        data=np.ascontiguousarray(pixels).tobytes(),
        compressed=False,
    )


def compressed_frame(
    topic: str,
    stamp_ns: int,
    data: bytes,
    fmt: str,
    *,
    recv_ns: int | None = None,
    frame_id: str = "",
) -> CameraFrame:
    """A CompressedImage frame; `fmt` as compressed_image_transport writes it.

    E.g. 'rgb8; jpeg compressed bgr8': source encoding; codec; what an OpenCV decode yields.
    """
    return CameraFrame(
        topic=topic,
        recv_ns=stamp_ns if recv_ns is None else recv_ns,
        stamp_ns=stamp_ns,
        frame_id=frame_id,
        encoding=fmt,
        height=0,
        width=0,
        step=0,
        data=bytes(data),
        compressed=True,
    )
