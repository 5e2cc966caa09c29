"""CameraFrames as rosbags' ROS 2 message objects (the bag side of `ros_bridge.camera_frame`)."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from ros_bridge.camera_frame import COMPRESSED_MSGTYPE, IMAGE_MSGTYPE, CameraFrame


@cache
def jazzy_typestore() -> Typestore:
    """The ROS 2 Jazzy message definitions (building them costs ~0.2 s, so once per process)."""
    return get_typestore(Stores.ROS2_JAZZY)


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
