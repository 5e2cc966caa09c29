"""builtin_interfaces/msg: Time and Duration."""

from __future__ import annotations

from ros_bridge.shim.message import Message


class Time(Message):
    """A point in time: seconds and nanoseconds since the epoch of its clock."""

    _type_name_ = "builtin_interfaces/msg/Time"
    _type_hash_ = "RIHS01_b106235e25a4c5ed35098aa0a61a3ee9c9b18d197f398b0e4206cea9acf9c197"
    _fields_ = (("sec", "int32"), ("nanosec", "uint32"))


class Duration(Message):
    """A span of time; `nanosec` is always the non-negative remainder."""

    _type_name_ = "builtin_interfaces/msg/Duration"
    _type_hash_ = "RIHS01_e8d009f659816f758b75334ee1a9ca5b5c0b859843261f14c7f937349599d93b"
    _fields_ = (("sec", "int32"), ("nanosec", "uint32"))
