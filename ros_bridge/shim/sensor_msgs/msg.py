"""sensor_msgs/msg: Image, CompressedImage and JointState."""

from __future__ import annotations

from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import Message
from ros_bridge.shim.std_msgs.msg import Header


class Image(Message):
    """An uncompressed image; `data` holds `step * height` bytes."""

    _type_name_ = "sensor_msgs/msg/Image"
    _type_hash_ = "RIHS01_d31d41a9a4c4bc8eae9be757b0beed306564f7526c88ea6a4588fb9582527d47"
    _fields_ = (
        ("header", Header),
        ("height", "uint32"),
        ("width", "uint32"),
        ("encoding", "string"),
        ("is_bigendian", "uint8"),
        ("step", "uint32"),
        ("data", seq("uint8")),
    )


class CompressedImage(Message):
    """A JPEG/PNG image; `format` reads like 'rgb8; jpeg compressed bgr8'."""

    _type_name_ = "sensor_msgs/msg/CompressedImage"
    _type_hash_ = "RIHS01_15640771531571185e2efc8a100baf923961a4d15d5569652e6cb6691e8e371a"
    _fields_ = (("header", Header), ("format", "string"), ("data", seq("uint8")))


class JointState(Message):
    _type_name_ = "sensor_msgs/msg/JointState"
    _type_hash_ = "RIHS01_a13ee3a330e346c9d87b5aa18d24e11690752bd33a0350f11c5882bc9179260e"
    _fields_ = (
        ("header", Header),
        ("name", seq("string")),
        ("position", seq("float64")),
        ("velocity", seq("float64")),
        ("effort", seq("float64")),
    )
