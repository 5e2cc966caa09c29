"""ROS 2 interfaces as a C++ node's rmw_cyclonedds lays them out, declared with plain `cyclonedds`.

Written from the .msg/.srv definitions (rcl_interfaces, rmw_dds_common, builtin_interfaces,
std_msgs, diagnostic_msgs) and rmw_cyclonedds' conventions, not from the shim: DDS type names
`pkg::msg::dds_::Name_`, final structs, `char` as uint8, a service's request and reply with the
request header `uint64 guid, int64 seq` in front. tests/unit/bridge/test_ros2_peer_types.py
checks their bytes against rosbags. Built with make_idl_struct: cyclonedds cannot resolve postponed
annotations here.
"""

from __future__ import annotations

from typing import Any

from cyclonedds.idl import make_idl_struct
from cyclonedds.idl.annotations import final
from cyclonedds.idl.types import (
    array,
    bounded_str,
    byte,
    float64,
    int32,
    int64,
    sequence,
    uint8,
    uint32,
    uint64,
)


def _struct(name: str, dds_name: str, fields: dict[str, Any]) -> Any:
    return final(make_idl_struct(name, dds_name, fields))


Time = _struct("Time", "builtin_interfaces::msg::dds_::Time_", {"sec": int32, "nanosec": uint32})
Header = _struct("Header", "std_msgs::msg::dds_::Header_", {"stamp": Time, "frame_id": str})

Gid = _struct("Gid", "rmw_dds_common::msg::dds_::Gid_", {"data": array[uint8, 16]})
NodeEntitiesInfo = _struct(
    "NodeEntitiesInfo",
    "rmw_dds_common::msg::dds_::NodeEntitiesInfo_",
    {
        "node_namespace": bounded_str[256],
        "node_name": bounded_str[256],
        "reader_gid_seq": sequence[Gid],
        "writer_gid_seq": sequence[Gid],
    },
)
ParticipantEntitiesInfo = _struct(
    "ParticipantEntitiesInfo",
    "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_",
    {"gid": Gid, "node_entities_info_seq": sequence[NodeEntitiesInfo]},
)

Log = _struct(
    "Log",
    "rcl_interfaces::msg::dds_::Log_",
    {
        "stamp": Time,
        "level": uint8,
        "name": str,
        "msg": str,
        "file": str,
        "function": str,
        "line": uint32,
    },
)
ParameterValue = _struct(
    "ParameterValue",
    "rcl_interfaces::msg::dds_::ParameterValue_",
    {
        "type": uint8,
        "bool_value": bool,
        "integer_value": int64,
        "double_value": float64,
        "string_value": str,
        "byte_array_value": sequence[byte],
        "bool_array_value": sequence[bool],
        "integer_array_value": sequence[int64],
        "double_array_value": sequence[float64],
        "string_array_value": sequence[str],
    },
)
Parameter = _struct(
    "Parameter", "rcl_interfaces::msg::dds_::Parameter_", {"name": str, "value": ParameterValue}
)
ParameterEvent = _struct(
    "ParameterEvent",
    "rcl_interfaces::msg::dds_::ParameterEvent_",
    {
        "stamp": Time,
        "node": str,
        "new_parameters": sequence[Parameter],
        "changed_parameters": sequence[Parameter],
        "deleted_parameters": sequence[Parameter],
    },
)
SetParametersResult = _struct(
    "SetParametersResult",
    "rcl_interfaces::msg::dds_::SetParametersResult_",
    {"successful": bool, "reason": str},
)

_HEADER = {"guid": uint64, "seq": int64}  # rmw_cyclonedds' cdds_request_header
SetParametersRequest = _struct(
    "SetParametersRequest",
    "rcl_interfaces::srv::dds_::SetParameters_Request_",
    {**_HEADER, "parameters": sequence[Parameter]},
)
SetParametersResponse = _struct(
    "SetParametersResponse",
    "rcl_interfaces::srv::dds_::SetParameters_Response_",
    {**_HEADER, "results": sequence[SetParametersResult]},
)
GetParametersRequest = _struct(
    "GetParametersRequest",
    "rcl_interfaces::srv::dds_::GetParameters_Request_",
    {**_HEADER, "names": sequence[str]},
)
GetParametersResponse = _struct(
    "GetParametersResponse",
    "rcl_interfaces::srv::dds_::GetParameters_Response_",
    {**_HEADER, "values": sequence[ParameterValue]},
)

KeyValue = _struct("KeyValue", "diagnostic_msgs::msg::dds_::KeyValue_", {"key": str, "value": str})
DiagnosticStatus = _struct(
    "DiagnosticStatus",
    "diagnostic_msgs::msg::dds_::DiagnosticStatus_",
    {
        "level": byte,
        "name": str,
        "message": str,
        "hardware_id": str,
        "values": sequence[KeyValue],
    },
)
DiagnosticArray = _struct(
    "DiagnosticArray",
    "diagnostic_msgs::msg::dds_::DiagnosticArray_",
    {"header": Header, "status": sequence[DiagnosticStatus]},
)
