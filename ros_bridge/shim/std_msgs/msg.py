"""std_msgs/msg: Header and the Float64MultiArray family."""

from __future__ import annotations

from ros_bridge.shim.builtin_interfaces.msg import Time
from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import Message


class Header(Message):
    """Acquisition time and coordinate frame of the data that carries it."""

    _type_name_ = "std_msgs/msg/Header"
    _type_hash_ = "RIHS01_f49fb3ae2cf070f793645ff749683ac6b06203e41c891e17701b1cb597ce6a01"
    _fields_ = (("stamp", Time), ("frame_id", "string"))


class MultiArrayDimension(Message):
    _type_name_ = "std_msgs/msg/MultiArrayDimension"
    _type_hash_ = "RIHS01_5e773a60a4c7fc8a54985f307c7837aa2994252a126c301957a24e31282c9cbe"
    _fields_ = (("label", "string"), ("size", "uint32"), ("stride", "uint32"))


class MultiArrayLayout(Message):
    _type_name_ = "std_msgs/msg/MultiArrayLayout"
    _type_hash_ = "RIHS01_4c66e6f78e740ac103a94cf63259f968e48c617e7699e829b63c21a5cb50dac6"
    _fields_ = (("dim", seq(MultiArrayDimension)), ("data_offset", "uint32"))


class Float64MultiArray(Message):
    """What ros2_control's forward_command_controller subscribes to (`data` per joint)."""

    _type_name_ = "std_msgs/msg/Float64MultiArray"
    _type_hash_ = "RIHS01_1025ddc6b9552d191f89ef1a8d2f60f3d373e28b283d8891ddcc974e8c55397f"
    _fields_ = (("layout", MultiArrayLayout), ("data", seq("float64")))
