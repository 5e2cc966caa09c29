"""Message classes behave like rosidl_generator_py's: defaults, Python types, setter checks."""

from __future__ import annotations

import array
import copy
import pickle

import numpy as np
import pytest

from ros_bridge.shim.builtin_interfaces.msg import Time
from ros_bridge.shim.diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from ros_bridge.shim.message import message_class
from ros_bridge.shim.rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor
from ros_bridge.shim.sensor_msgs.msg import Image, JointState
from ros_bridge.shim.std_msgs.msg import Float64MultiArray, Header
from ros_bridge.shim.trajectory_msgs.msg import JointTrajectory


def test_defaults_have_rosidl_types() -> None:
    image = Image()
    assert image.header == Header() and image.header.stamp == Time(sec=0, nanosec=0)
    assert image.encoding == "" and image.height == 0 and image.is_bigendian == 0
    assert isinstance(image.data, array.array) and image.data.typecode == "B"
    assert JointState().position.typecode == "d" and JointState().name == []
    assert DiagnosticStatus().level == b"\x00" and DiagnosticStatus().values == []
    assert JointTrajectory().points == []


def test_diagnostic_levels_are_bytes_like_rclpy() -> None:
    assert (DiagnosticStatus.OK, DiagnosticStatus.WARN) == (b"\x00", b"\x01")
    assert (DiagnosticStatus.ERROR, DiagnosticStatus.STALE) == (b"\x02", b"\x03")
    with pytest.raises(TypeError):
        DiagnosticStatus(level=1)  # rosidl wants a 1-byte bytes, not an int


def test_uint8_data_accepts_bytes_and_keeps_array_objects() -> None:
    payload = bytes(range(256)) * 10
    image = Image(data=payload)
    assert image.data.tobytes() == payload
    image.data = bytearray(b"\x01\x02")
    assert image.data == array.array("B", [1, 2])
    image.data = memoryview(b"\x03")
    assert list(image.data) == [3]
    owned = array.array("B", [9, 9])
    image.data = owned
    assert image.data is owned  # rosidl stores the caller's array.array as is


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("height", -1),  # uint32 range
        ("height", 2**32),
        ("height", 1.0),  # float for an int field
        ("encoding", b"rgb8"),  # bytes for a string
        ("data", [256]),  # uint8 range
        ("data", "abc"),  # a str is not a sequence of ints
        ("data", np.zeros(4, np.uint8)),  # rosidl rejects numpy arrays for sequences
        ("data", array.array("H", [1])),  # wrong typecode
        ("header", Time()),  # wrong sub-message
    ],
)
def test_setters_reject_values_rosidl_rejects(field: str, value: object) -> None:
    with pytest.raises(AssertionError):
        setattr(Image(), field, value)


def test_float_fields_need_floats_like_rosidl() -> None:
    with pytest.raises(TypeError):
        JointState(position=[0, 1])  # ints are rejected by rosidl's float64[] setter
    joints = JointState(position=[0.0, float("inf")], name=("a", "b"))
    assert list(joints.position) == [0.0, float("inf")] and joints.name == ["a", "b"]
    with pytest.raises(TypeError):
        Float64MultiArray(data=np.zeros(3))


def test_unknown_fields_and_kwargs_are_rejected() -> None:
    with pytest.raises(AssertionError):
        Image(colour="red")
    with pytest.raises(AttributeError):
        Image().colour = "red"


def test_bounded_sequence_limit() -> None:
    ranges = [FloatingPointRange(from_value=0.0, to_value=1.0)] * 2
    with pytest.raises(AssertionError):
        ParameterDescriptor(floating_point_range=ranges)


def test_equality_copy_pickle_repr() -> None:
    status = DiagnosticStatus(level=DiagnosticStatus.WARN, name="n", values=[KeyValue(key="k")])
    twin = copy.deepcopy(status)
    assert twin == status and twin is not status and twin.values[0] is not status.values[0]
    assert pickle.loads(pickle.dumps(status)) == status
    twin.values[0].value = "changed"
    assert twin != status
    assert status != KeyValue()
    assert repr(Time(sec=1, nanosec=2)) == "builtin_interfaces.msg.Time(sec=1, nanosec=2)"


def test_fields_and_field_types_like_rosidl() -> None:
    assert Image.get_fields_and_field_types() == {
        "header": "std_msgs/Header",
        "height": "uint32",
        "width": "uint32",
        "encoding": "string",
        "is_bigendian": "uint8",
        "step": "uint32",
        "data": "sequence<uint8>",
    }
    assert DiagnosticStatus.get_fields_and_field_types()["level"] == "octet"
    assert JointTrajectory.get_fields_and_field_types()["points"] == (
        "sequence<trajectory_msgs/JointTrajectoryPoint>"
    )


def test_message_class_lookup_by_ros_name() -> None:
    assert message_class("sensor_msgs/msg/Image") is Image
    assert message_class("diagnostic_msgs/msg/DiagnosticArray").__name__ == "DiagnosticArray"
    with pytest.raises(ValueError):
        message_class("geometry_msgs/msg/Twist")
