"""rosbag2 I/O for camera topics: read, record and pace recorded image streams (via `rosbags`)."""

from ros_bridge.bags.messages import frame_to_msg, jazzy_typestore
from ros_bridge.bags.pacing import PacedFrame, paced
from ros_bridge.bags.reader import BagSummary, TopicSummary, describe_bag, read_frames
from ros_bridge.bags.recorder import STORAGES, BagRecorder

__all__ = [
    "STORAGES",
    "BagRecorder",
    "BagSummary",
    "PacedFrame",
    "TopicSummary",
    "describe_bag",
    "frame_to_msg",
    "jazzy_typestore",
    "paced",
    "read_frames",
]
