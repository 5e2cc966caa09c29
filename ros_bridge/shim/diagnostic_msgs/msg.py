"""diagnostic_msgs/msg: what diagnostic_updater publishes on /diagnostics."""

from __future__ import annotations

from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import Message
from ros_bridge.shim.std_msgs.msg import Header


class KeyValue(Message):
    _type_name_ = "diagnostic_msgs/msg/KeyValue"
    _type_hash_ = "RIHS01_d68081eaa540288c5440753baecef0c4e16e81a5f78ad68902ded5100413bb42"
    _fields_ = (("key", "string"), ("value", "string"))


class DiagnosticStatus(Message):
    """One component's state; `level` is a 1-byte `bytes`, as in rclpy (OK == b'\\x00')."""

    OK = b"\x00"
    WARN = b"\x01"
    ERROR = b"\x02"
    STALE = b"\x03"

    _type_name_ = "diagnostic_msgs/msg/DiagnosticStatus"
    _type_hash_ = "RIHS01_b0e3e692ea2d54a8af2f4ef1930e81556a2db55216b771f8a7d2724ed47bf0e4"
    _fields_ = (
        ("level", "byte"),
        ("name", "string"),
        ("message", "string"),
        ("hardware_id", "string"),
        ("values", seq(KeyValue)),
    )


class DiagnosticArray(Message):
    _type_name_ = "diagnostic_msgs/msg/DiagnosticArray"
    _type_hash_ = "RIHS01_5a8a36efb05fb25070fa0fb3810290c0e6cd4862b54a8fb975a1ee8dc55a333e"
    _fields_ = (("header", Header), ("status", seq(DiagnosticStatus)))
