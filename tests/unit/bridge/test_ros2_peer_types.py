"""The ROS 2 peer's types (tests/support/ros2_peer_types.py, plain cyclonedds) against rosbags,
byte for byte, so the graph tests' other side speaks what a ROS 2 node speaks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.support import ros2_peer_types as T
from tests.support.ros_reference import typestore, wire_bytes

TS = typestore()
R = TS.types


def _peer_value() -> Any:
    return T.ParameterValue(
        type=9,
        bool_value=True,
        integer_value=-7,
        double_value=80.0,
        string_value="hold",
        byte_array_value=[0, 255],
        bool_array_value=[False, True],
        integer_array_value=[1, 2**40],
        double_array_value=[0.25],
        string_array_value=["a", "ü"],
    )


def _rosbags_value() -> Any:
    return R["rcl_interfaces/msg/ParameterValue"](
        type=9,
        bool_value=True,
        integer_value=-7,
        double_value=80.0,
        string_value="hold",
        byte_array_value=np.array([0, -1], np.int8),
        bool_array_value=np.array([False, True]),
        integer_array_value=np.array([1, 2**40], np.int64),
        double_array_value=np.array([0.25]),
        string_array_value=["a", "ü"],
    )


def _gid(peer: bool, fill: int) -> Any:
    data = list(range(fill, fill + 16))
    return T.Gid(data=data) if peer else R["rmw_dds_common/msg/Gid"](data=np.array(data, np.uint8))


def _participant(peer: bool) -> Any:
    node_type = T.NodeEntitiesInfo if peer else R["rmw_dds_common/msg/NodeEntitiesInfo"]
    node = node_type(
        node_namespace="/robot",
        node_name="ros2_peer",
        reader_gid_seq=[_gid(peer, 1), _gid(peer, 40)],
        writer_gid_seq=[],
    )
    info_type = (
        T.ParticipantEntitiesInfo if peer else R["rmw_dds_common/msg/ParticipantEntitiesInfo"]
    )
    return info_type(gid=_gid(peer, 100), node_entities_info_seq=[node])


def _log(peer: bool) -> Any:
    time_type = T.Time if peer else R["builtin_interfaces/msg/Time"]
    fields = {"level": 40, "name": "vla_bridge", "msg": "down", "file": "f.py", "function": "g"}
    log_type = T.Log if peer else R["rcl_interfaces/msg/Log"]
    return log_type(stamp=time_type(sec=3, nanosec=4), line=7, **fields)


def _event(peer: bool) -> Any:
    value = _peer_value() if peer else _rosbags_value()
    parameter = (T.Parameter if peer else R["rcl_interfaces/msg/Parameter"])(name="x", value=value)
    time_type = T.Time if peer else R["builtin_interfaces/msg/Time"]
    event_type = T.ParameterEvent if peer else R["rcl_interfaces/msg/ParameterEvent"]
    return event_type(
        stamp=time_type(sec=1, nanosec=2),
        node="/vla_bridge",
        new_parameters=[],
        changed_parameters=[parameter],
        deleted_parameters=[],
    )


def _diagnostics(peer: bool) -> Any:
    kv = (T.KeyValue if peer else R["diagnostic_msgs/msg/KeyValue"])(key="deadline_ms", value="80")
    level = 2  # cyclonedds' `byte` is an int, as rosbags' is
    status_type = T.DiagnosticStatus if peer else R["diagnostic_msgs/msg/DiagnosticStatus"]
    status = status_type(level=level, name="n: latency", message="m", hardware_id="h", values=[kv])
    time_type = T.Time if peer else R["builtin_interfaces/msg/Time"]
    header = (T.Header if peer else R["std_msgs/msg/Header"])(
        stamp=time_type(sec=5, nanosec=6), frame_id=""
    )
    array_type = T.DiagnosticArray if peer else R["diagnostic_msgs/msg/DiagnosticArray"]
    return array_type(header=header, status=[status])


@pytest.mark.parametrize(
    ("build", "type_name"),
    [
        (_participant, "rmw_dds_common/msg/ParticipantEntitiesInfo"),
        (_log, "rcl_interfaces/msg/Log"),
        (_event, "rcl_interfaces/msg/ParameterEvent"),
        (_diagnostics, "diagnostic_msgs/msg/DiagnosticArray"),
    ],
)
def test_peer_messages_are_rosbags_bytes(build: Any, type_name: str) -> None:
    assert build(True).serialize() == bytes(TS.serialize_cdr(build(False), type_name))


def test_peer_service_samples_are_rmw_cyclonedds_wire_bytes() -> None:
    guid, seq = 0x8000_0000_0000_0001, 42  # a guid past int64: rmw's header field is a uint64
    peer_parameter = T.Parameter(name="deadline_ms", value=_peer_value())
    parameter = R["rcl_interfaces/msg/Parameter"](name="deadline_ms", value=_rosbags_value())
    request = T.SetParametersRequest(guid=guid, seq=seq, parameters=[peer_parameter])
    assert request.serialize() == wire_bytes(
        "SetParameters", "Request", guid, seq, parameters=[parameter]
    )
    result = R["rcl_interfaces/msg/SetParametersResult"](successful=False, reason="read-only")
    peer_result = T.SetParametersResult(successful=False, reason="read-only")
    response = T.SetParametersResponse(guid=guid, seq=seq, results=[peer_result])
    assert response.serialize() == wire_bytes(
        "SetParameters", "Response", guid, seq, results=[result]
    )
    get = T.GetParametersRequest(guid=guid, seq=seq, names=["a", "bc"])
    assert get.serialize() == wire_bytes("GetParameters", "Request", guid, seq, names=["a", "bc"])
    values = T.GetParametersResponse(guid=guid, seq=seq, values=[_peer_value()])
    reference = wire_bytes("GetParameters", "Response", guid, seq, values=[_rosbags_value()])
    assert values.serialize() == reference
