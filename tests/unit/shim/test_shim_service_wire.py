"""The shim frames service requests and replies as rmw_cyclonedds does: the message's CDR with
`uint64 guid, int64 seq` after the encapsulation, checked against rosbags' bytes of the same."""

from __future__ import annotations

import numpy as np
import pytest
from cyclonedds.core import Policy, Qos

from ros_bridge.shim.cdr import CdrError, deserialize_message, serialize_message
from ros_bridge.shim.rcl_interfaces import srv
from ros_bridge.shim.rcl_interfaces.msg import Parameter, ParameterValue, SetParametersResult
from ros_bridge.shim.service_wire import RequestHeader, frame, unframe
from ros_bridge.shim.transport.dds_service import user_data
from tests.support.ros_reference import typestore, wire_bytes

R = typestore().types


def test_a_framed_request_is_the_bytes_rmw_cyclonedds_sends() -> None:
    header = RequestHeader(guid=2**64 - 2, seq=7)
    request = srv.SetParameters.Request(
        parameters=[Parameter(name="deadline_ms", value=ParameterValue(type=3, double_value=80.0))]
    )
    empty = {
        name: np.array([], dtype)
        for name, dtype in (
            ("byte_array_value", np.int8),
            ("bool_array_value", bool),
            ("integer_array_value", np.int64),
            ("double_array_value", np.float64),
        )
    }
    rb_value = R["rcl_interfaces/msg/ParameterValue"](
        type=3,
        bool_value=False,
        integer_value=0,
        double_value=80.0,
        string_value="",
        string_array_value=[],
        **empty,
    )
    rb_parameter = R["rcl_interfaces/msg/Parameter"](name="deadline_ms", value=rb_value)
    expected = wire_bytes(
        "SetParameters", "Request", header.guid, header.seq, parameters=[rb_parameter]
    )
    assert frame(header, serialize_message(request)) == expected


def test_a_reply_from_a_big_endian_node_unframes() -> None:
    result = R["rcl_interfaces/msg/SetParametersResult"](successful=False, reason="read-only")
    store = typestore()
    cls = store.types["wire_test/msg/SetParameters_Response"]
    sample = bytes(
        store.serialize_cdr(
            cls(guid=5, seq=-1, results=[result]), cls.__msgtype__, little_endian=False
        )
    )
    header, body = unframe(sample)
    assert header == RequestHeader(5, -1)
    response = deserialize_message(body, srv.SetParameters.Response)
    assert response.results == [SetParametersResult(successful=False, reason="read-only")]


@pytest.mark.parametrize(
    "data", [b"", b"\x00\x01\x00\x00" + bytes(8), b"\x00\x07\x00\x00" + bytes(16)]
)
def test_short_or_foreign_samples_are_cdr_errors(data: bytes) -> None:
    with pytest.raises(CdrError):
        unframe(data)


def test_user_data_of_an_endpoint_without_one_is_empty() -> None:
    """Discovered endpoints of other DDS programs may carry no USER_DATA at all: cyclonedds then
    hands back None for the policy, which must read as "no ids" rather than fail the call."""
    assert user_data(Qos()) == {}
    assert user_data(Qos(Policy.Userdata(data=b""))) == {}
    assert user_data(Qos(Policy.Userdata(data=b"clientid=3;x=y;"))) == {"clientid": "3", "x": "y"}
