"""The shim's CDR bytes against rosbags' serializer (an independent ROS 2 implementation).

Each sample message is built once with the shim's classes; `to_rosbags` rebuilds it as a rosbags
object by walking rosbags' own message definitions, so field names and types come from rosbags
(its Jazzy store, plus the parameter services from their .srv files: tests/support/ros_reference).
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest
from PIL import Image as PilImage
from rosbags.interfaces import Nodetype

from ros_bridge.shim.builtin_interfaces.msg import Duration, Time
from ros_bridge.shim.cdr import CdrError, deserialize_message, serialize_message
from ros_bridge.shim.diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from ros_bridge.shim.message import Message
from ros_bridge.shim.rcl_interfaces import srv
from ros_bridge.shim.rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ListParametersResult,
    Log,
    Parameter,
    ParameterDescriptor,
    ParameterEvent,
    ParameterType,
    ParameterValue,
    SetParametersResult,
)
from ros_bridge.shim.rmw_dds_common.msg import Gid, NodeEntitiesInfo, ParticipantEntitiesInfo
from ros_bridge.shim.sensor_msgs.msg import CompressedImage, Image, JointState
from ros_bridge.shim.std_msgs.msg import (
    Float64MultiArray,
    Header,
    MultiArrayDimension,
    MultiArrayLayout,
)
from ros_bridge.shim.trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from tests.support.ros_reference import type_hash, typestore

TS = typestore()
NUMPY_DTYPES = {
    "bool": np.bool_,
    "byte": np.uint8,
    "char": np.uint8,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
    "float32": np.float32,
    "float64": np.float64,
}


def to_rosbags(msg: Message) -> Any:
    type_name = msg._type_name_
    kwargs = {
        name: _to_rosbags_value(desc, getattr(msg, name))
        for name, desc in TS.get_msgdef(type_name).fields
    }
    return TS.types[type_name](**kwargs)


def _to_rosbags_value(desc: Any, value: Any) -> Any:
    kind, detail = desc
    if kind == Nodetype.NAME:
        return to_rosbags(value)
    if kind == Nodetype.BASE:
        return value[0] if detail[0] == "byte" else value
    (elem_kind, elem_detail), _bound = detail
    if elem_kind == Nodetype.BASE and elem_detail[0] != "string":
        return np.asarray(_numbers(value), dtype=NUMPY_DTYPES[elem_detail[0]])
    return [_to_rosbags_value((elem_kind, elem_detail), v) for v in value]


def _numbers(values: Any) -> list[Any]:
    """Sequence elements as numbers (a `byte[]` holds 1-byte bytes in rclpy, ints in rosbags)."""
    return [v[0] if isinstance(v, bytes) else v for v in values]


def assert_same_content(shim_msg: Message, rb_msg: Any) -> None:
    """Field-by-field equality of a shim message and a rosbags message, per rosbags' definition."""
    for name, desc in TS.get_msgdef(shim_msg._type_name_).fields:
        _assert_same_value(desc, getattr(shim_msg, name), getattr(rb_msg, name), name)


def _assert_same_value(desc: Any, mine: Any, theirs: Any, where: str) -> None:
    kind, detail = desc
    if kind == Nodetype.NAME:
        assert_same_content(mine, theirs)
    elif kind == Nodetype.BASE:
        assert (mine[0] if detail[0] == "byte" else mine) == theirs, where
    else:
        (elem_kind, elem_detail), _ = detail
        assert len(mine) == len(theirs), where
        if elem_kind == Nodetype.BASE and elem_detail[0] != "string":
            theirs = np.asarray(theirs)
            if elem_detail[0] == "byte":  # rosbags decodes byte as int8, rclpy as 1-byte bytes
                theirs = theirs.astype(np.uint8)
            np.testing.assert_array_equal(np.asarray(_numbers(mine)), theirs, err_msg=where)
        else:
            for a, b in zip(mine, theirs, strict=True):
                _assert_same_value((elem_kind, elem_detail), a, b, where)


def _header(frame_id: str = "camera_optical_frame") -> Header:
    return Header(stamp=Time(sec=1_732_000_123, nanosec=456_789_012), frame_id=frame_id)


def _vga_rgb8() -> Image:
    ys, xs = np.mgrid[0:480, 0:640]
    pixels = np.stack([xs % 256, ys % 256, (xs + ys) % 256], axis=-1).astype(np.uint8)
    return Image(
        header=_header(),
        height=480,
        width=640,
        encoding="rgb8",
        is_bigendian=0,
        step=640 * 3,
        data=pixels.tobytes(),
    )


def _jpeg() -> CompressedImage:
    buffer = io.BytesIO()
    PilImage.new("RGB", (32, 24), (200, 30, 90)).save(buffer, format="JPEG")
    return CompressedImage(
        header=_header("wrist_cam"), format="rgb8; jpeg compressed bgr8", data=buffer.getvalue()
    )


def _trajectory() -> JointTrajectory:
    points = [
        JointTrajectoryPoint(
            positions=[0.1 * i + j for j in range(7)],
            velocities=[0.01 * i] * 7,
            accelerations=[],
            effort=[],
            time_from_start=Duration(sec=0, nanosec=20_000_000 * (i + 1)),
        )
        for i in range(5)
    ]
    names = [f"joint_{j}" for j in range(6)] + ["gripper_ünï"]
    return JointTrajectory(header=_header("base_link"), joint_names=names, points=points)


def _diagnostics() -> DiagnosticArray:
    statuses = [
        DiagnosticStatus(
            level=DiagnosticStatus.OK,
            name="vla_bridge: camera input",
            message="Desired frequency met",
            hardware_id="none",
            values=[KeyValue(key="Actual frequency (Hz)", value="29.97")],
        ),
        DiagnosticStatus(
            level=DiagnosticStatus.WARN,
            name="vla_bridge: inference latency",
            message="P99 ITL 41.2 ms > budget 40 ms — degraded",
            hardware_id="gpu0",
            values=[KeyValue(key="p50_ms", value="12.5"), KeyValue(key="p99_ms", value="41.2")],
        ),
        DiagnosticStatus(
            level=DiagnosticStatus.STALE, name="", message="", hardware_id="", values=[]
        ),
    ]
    return DiagnosticArray(header=_header(""), status=statuses)


def _parameter_values() -> ParameterValue:
    return ParameterValue(
        type=ParameterType.PARAMETER_STRING_ARRAY,
        bool_value=True,
        integer_value=-(2**62),
        double_value=80.5,
        string_value="hold",
        byte_array_value=[b"\x00", b"\xff"],
        bool_array_value=[True, False, True],
        integer_array_value=[1, -2, 3],
        double_array_value=[0.5],
        string_array_value=["/cam/left", "/cam/rechts_ü"],
    )


_GID = Gid(data=bytes(range(1, 17)))
GRAPH_SAMPLES: dict[str, Message] = {
    "Gid": _GID,
    "NodeEntitiesInfo/empty": NodeEntitiesInfo(node_namespace="/", node_name="n"),
    "ParticipantEntitiesInfo": ParticipantEntitiesInfo(
        gid=_GID,
        node_entities_info_seq=[
            NodeEntitiesInfo(
                node_namespace="/robot",
                node_name="vla_bridge",
                reader_gid_seq=[_GID, Gid(data=bytes(16))],
                writer_gid_seq=[Gid(data=b"\xff" * 16)],
            ),
            NodeEntitiesInfo(node_namespace="/", node_name="other"),
        ],
    ),
    "Log": Log(
        stamp=Time(sec=1_732_000_123, nanosec=5),
        level=30,
        name="vla_bridge.worker",
        msg="server unavailable: ConnectError — ü",
        file="/opt/ros_bridge/bridge_node.py",
        function="report",
        line=171,
    ),
    "ParameterValue": _parameter_values(),
    "Parameter": Parameter(name="deadline_ms", value=ParameterValue(type=3, double_value=80.0)),
    "ParameterEvent": ParameterEvent(
        stamp=Time(sec=7, nanosec=8),
        node="/vla_bridge",
        new_parameters=[Parameter(name="a", value=_parameter_values())],
        changed_parameters=[Parameter(name="deadline_ms", value=ParameterValue(type=3))],
    ),
    "ListParametersResult": ListParametersResult(names=["a.b", "c"], prefixes=["a"]),
    "GetParameters_Request": srv.GetParameters.Request(names=["deadline_ms", "on_late"]),
    "GetParameters_Response": srv.GetParameters.Response(values=[_parameter_values()]),
    "GetParameterTypes_Response": srv.GetParameterTypes.Response(types=[3, 4, 9]),
    "SetParameters_Request": srv.SetParameters.Request(
        parameters=[Parameter(name="x", value=_parameter_values())]
    ),
    "SetParameters_Response": srv.SetParameters.Response(
        results=[SetParametersResult(successful=False, reason="read-only")]
    ),
    "SetParametersAtomically_Response": srv.SetParametersAtomically.Response(
        result=SetParametersResult(successful=True)
    ),
    "ListParameters_Request": srv.ListParameters.Request(prefixes=["a"], depth=2**64 - 1),
    "ListParameters_Response": srv.ListParameters.Response(
        result=ListParametersResult(names=["a.b"], prefixes=["a"])
    ),
    "DescribeParameters_Response": srv.DescribeParameters.Response(
        descriptors=[ParameterDescriptor(name="x", type=2, read_only=True)]
    ),
}

SAMPLES: dict[str, Message] = {
    "Time": Time(sec=-5, nanosec=999_999_999),
    "Duration": Duration(sec=3, nanosec=250_000_000),
    "Header/unicode": _header("kamera_vorn_ü_相机"),
    "Image/vga_rgb8": _vga_rgb8(),
    "Image/empty": Image(header=_header(""), encoding="mono8"),
    "Image/mono16_odd_size": Image(
        header=_header(),
        height=3,
        width=3,
        encoding="mono16",
        is_bigendian=1,
        step=6,
        data=bytes(range(18)),
    ),
    "CompressedImage/jpeg": _jpeg(),
    "JointState": JointState(
        header=_header("base"),
        name=["shoulder", "elbow", "wrist"],
        position=[0.5, -1.25, math.pi],
        velocity=[],
        effort=[],
    ),
    "JointState/empty": JointState(),
    "MultiArrayDimension": MultiArrayDimension(label="joints", size=7, stride=7),
    "MultiArrayLayout": MultiArrayLayout(
        dim=[
            MultiArrayDimension(label="chunk", size=4, stride=28),
            MultiArrayDimension(label="joint", size=7, stride=7),
        ],
        data_offset=0,
    ),
    "Float64MultiArray": Float64MultiArray(
        layout=MultiArrayLayout(dim=[MultiArrayDimension(label="joint", size=3, stride=3)]),
        data=[0.25, -1e-300, 1e300],
    ),
    "Float64MultiArray/nan_empty_layout": Float64MultiArray(data=[float("nan")] * 4),
    "Float64MultiArray/empty": Float64MultiArray(),
    "JointTrajectoryPoint": JointTrajectoryPoint(
        positions=[1.0], effort=[2.0, 3.0], time_from_start=Duration(sec=1)
    ),
    "JointTrajectory": _trajectory(),
    "JointTrajectory/empty": JointTrajectory(),
    "KeyValue": KeyValue(key="window", value="1000"),
    "DiagnosticStatus": DiagnosticStatus(level=DiagnosticStatus.ERROR, name="x", message="down"),
    "DiagnosticArray": _diagnostics(),
    "ParameterDescriptor": ParameterDescriptor(
        name="deadline_ms",
        type=3,
        description="Deadline for an action, ms",
        additional_constraints="> 0",
        read_only=False,
        dynamic_typing=False,
        floating_point_range=[FloatingPointRange(from_value=1.0, to_value=1000.0, step=0.0)],
    ),
    "ParameterDescriptor/int_range": ParameterDescriptor(
        name="priority",
        type=2,
        read_only=True,
        integer_range=[IntegerRange(from_value=-5, to_value=5, step=1)],
    ),
    "SetParametersResult": SetParametersResult(successful=False, reason="budget must be > 0"),
    "ParameterType": ParameterType(),
    **GRAPH_SAMPLES,
}


@pytest.mark.parametrize("key", SAMPLES)
def test_bytes_equal_rosbags(key: str) -> None:
    msg = SAMPLES[key]
    expected = bytes(TS.serialize_cdr(to_rosbags(msg), msg._type_name_))
    assert serialize_message(msg) == expected


@pytest.mark.parametrize("key", SAMPLES)
def test_decodes_rosbags_bytes(key: str) -> None:
    msg = SAMPLES[key]
    for little_endian in (True, False):
        data = TS.serialize_cdr(to_rosbags(msg), msg._type_name_, little_endian=little_endian)
        decoded = deserialize_message(data, type(msg))
        assert_same_content(decoded, to_rosbags(msg))


@pytest.mark.parametrize("key", SAMPLES)
def test_rosbags_decodes_our_bytes(key: str) -> None:
    msg = SAMPLES[key]
    decoded = TS.deserialize_cdr(serialize_message(msg), msg._type_name_)
    assert_same_content(msg, decoded)


@pytest.mark.parametrize("key", SAMPLES)
def test_round_trip(key: str) -> None:
    msg = SAMPLES[key]
    decoded = deserialize_message(serialize_message(msg), type(msg))
    assert type(decoded) is type(msg)
    if key == "Float64MultiArray/nan_empty_layout":
        assert all(math.isnan(v) for v in decoded.data)
    else:
        assert decoded == msg


def test_decoded_types_are_rosidl_python_types() -> None:
    image = deserialize_message(serialize_message(_vga_rgb8()), Image)
    assert image.data.typecode == "B" and len(image.data) == 640 * 480 * 3
    status = deserialize_message(serialize_message(_diagnostics()), DiagnosticArray).status[1]
    assert status.level == b"\x01" and isinstance(status.values, list)
    joints = deserialize_message(serialize_message(SAMPLES["JointState"]), JointState)
    assert joints.position.typecode == "d" and joints.name == ["shoulder", "elbow", "wrist"]


def test_trailing_padding_is_ignored() -> None:
    """Cyclone pads samples to 4 bytes on the wire."""
    msg = SAMPLES["Header/unicode"]
    assert deserialize_message(serialize_message(msg) + b"\x00\x00\x00", Header) == msg


@pytest.mark.parametrize("cut", [3, 10, 30])
def test_truncated_or_foreign_samples_raise_cdr_error(cut: int) -> None:
    data = serialize_message(SAMPLES["JointState"])
    with pytest.raises(CdrError):
        deserialize_message(data[:cut], JointState)
    with pytest.raises(CdrError):
        deserialize_message(b"\x00\x07\x00\x00" + data[4:], JointState)  # XCDR2 header


@pytest.mark.parametrize("msg_type", sorted({type(m) for m in SAMPLES.values()}, key=str))
def test_type_hashes_match_rosbags(msg_type: type[Message]) -> None:
    assert msg_type._type_hash_ == type_hash(msg_type._type_name_)


@pytest.mark.parametrize(
    "srv_type",
    [
        srv.GetParameters,
        srv.GetParameterTypes,
        srv.SetParameters,
        srv.SetParametersAtomically,
        srv.ListParameters,
        srv.DescribeParameters,
    ],
)
def test_service_type_hashes_match_rosbags(srv_type: type) -> None:
    """A service's hash covers its request, response and event messages, as rosidl builds it."""
    assert srv_type._type_hash_ == type_hash(srv_type._type_name_)
    assert srv_type.Request._type_name_ == srv_type._type_name_ + "_Request"


def test_fixed_arrays_are_numpy_and_checked() -> None:
    gid = deserialize_message(serialize_message(_GID), Gid)
    assert gid.data.dtype == np.uint8 and gid.data.tobytes() == bytes(range(1, 17))
    with pytest.raises(TypeError):
        Gid(data=bytes(15))  # char[16] takes exactly 16
    with pytest.raises(TypeError):
        NodeEntitiesInfo(node_name="n" * 257)  # string<=256


def test_image_hash_matches_the_published_constant() -> None:
    assert Image._type_hash_ == (
        "RIHS01_d31d41a9a4c4bc8eae9be757b0beed306564f7526c88ea6a4588fb9582527d47"
    )
