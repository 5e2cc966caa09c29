"""rosbag2 I/O for camera topics: read, record and pace recorded image streams (via `rosbags`)."""

from ros_bridge.bags.frame import (
    CAMERA_MSGTYPES,
    COMPRESSED_MSGTYPE,
    IMAGE_MSGTYPE,
    CameraFrame,
    compressed_frame,
    frame_from_msg,
    frame_to_msg,
    jazzy_typestore,
    raw_frame,
)
from ros_bridge.bags.pacing import PacedFrame, paced
from ros_bridge.bags.reader import BagSummary, TopicSummary, describe_bag, read_frames
from ros_bridge.bags.recorder import STORAGES, BagRecorder

__all__ = [
    "CAMERA_MSGTYPES",
    "COMPRESSED_MSGTYPE",
    "IMAGE_MSGTYPE",
    "STORAGES",
    "BagRecorder",
    "BagSummary",
    "CameraFrame",
    "PacedFrame",
    "TopicSummary",
    "compressed_frame",
    "describe_bag",
    "frame_from_msg",
    "frame_to_msg",
    "jazzy_typestore",
    "paced",
    "raw_frame",
    "read_frames",
]
