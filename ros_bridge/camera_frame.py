"""One camera message as the bridge sees it (ROS-free).

The live node flattens the Image / CompressedImage messages it receives into `CameraFrame`s
(`frame_from_msg` is duck-typed over rclpy's, the shim's and rosbags' message objects); the bag
tools read and write them (ros_bridge.bags). Nothing here needs ROS or rosbags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

IMAGE_MSGTYPE = "sensor_msgs/msg/Image"
COMPRESSED_MSGTYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_MSGTYPES = (IMAGE_MSGTYPE, COMPRESSED_MSGTYPE)
NS_PER_S = 1_000_000_000


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
