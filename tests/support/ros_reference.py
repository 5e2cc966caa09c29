"""rosbags as the independent reference for ROS 2 graph, log and parameter interfaces.

rosbags' Jazzy store has every message; two things are added here, as ROS 2 itself does them:
* `char` becomes `uint8` before hashing: rosidl_adapter converts a `.msg` to `.idl` that way, and
  ROS 2 hashes the `.idl` (rosbags keeps `char`, so its hashes of rmw_dds_common/Gid and of
  service_msgs/ServiceEventInfo differ from what a ROS 2 node advertises);
* the parameter services, from their `.srv` definitions: a request, a response, and the event
  message `<Service>_Event` that rosidl generates for every service; the service type is the
  three of them, and its RIHS01 hash covers all three.
A service's request or reply travels over rmw_cyclonedds with a `uint64 guid, int64 seq` header in
front of its fields; `wire_bytes` builds that sample with rosbags for byte-for-byte checks.
"""

from __future__ import annotations

import functools
from typing import Any

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

# rcl_interfaces/srv/*.srv, request and response (comments left out).
PARAMETER_SERVICES = {
    "GetParameters": ("string[] names", "ParameterValue[] values"),
    "GetParameterTypes": ("string[] names", "uint8[] types"),
    "SetParameters": ("Parameter[] parameters", "SetParametersResult[] results"),
    "SetParametersAtomically": ("Parameter[] parameters", "SetParametersResult result"),
    "ListParameters": (
        "uint64 DEPTH_RECURSIVE=0\nstring[] prefixes\nuint64 depth",
        "ListParametersResult result",
    ),
    "DescribeParameters": ("string[] names", "ParameterDescriptor[] descriptors"),
}
_PKG_TYPES = ("ParameterValue", "Parameter", "SetParametersResult", "ListParametersResult")
_PKG_TYPES += ("ParameterDescriptor",)
REQUEST_HEADER = "uint64 guid\nint64 seq\n"


def _as_idl(obj: Any) -> Any:
    """Field definitions with rosidl_adapter's `char` -> `uint8`, and `.../srv/msg/X` names (as
    rosbags' parser writes them) back to `.../srv/X`."""
    if isinstance(obj, str):
        return "uint8" if obj == "char" else obj.replace("/srv/msg/", "/srv/")
    if isinstance(obj, tuple | list):
        return type(obj)(_as_idl(o) for o in obj)
    return obj


def _qualified(definition: str) -> str:
    for name in _PKG_TYPES:
        definition = definition.replace(f"{name}[", f"rcl_interfaces/{name}[")
        definition = definition.replace(f"{name} ", f"rcl_interfaces/{name} ")
    return definition


def _service_types() -> dict[str, Any]:
    types: dict[str, Any] = {}
    for name, (request, response) in PARAMETER_SERVICES.items():
        base = f"rcl_interfaces/srv/{name}"
        parts = {
            f"{base}_Request": _qualified(request),
            f"{base}_Response": _qualified(response),
            f"{base}_Event": f"service_msgs/ServiceEventInfo info\n{base}_Request[<=1] request\n"
            f"{base}_Response[<=1] response\n",
            base: f"{base}_Request request_message\n{base}_Response response_message\n"
            f"{base}_Event event_message\n",
        }
        for type_name, text in parts.items():
            types.update(get_types_from_msg(text, type_name))
        for kind in ("Request", "Response"):  # the same fields behind rmw's request header
            header = REQUEST_HEADER + _qualified(PARAMETER_SERVICES[name][kind == "Response"])
            types.update(get_types_from_msg(header, f"wire_test/msg/{name}_{kind}"))
    return types


@functools.cache
def typestore() -> Typestore:
    store = get_typestore(Stores.EMPTY)
    jazzy = get_typestore(Stores.ROS2_JAZZY)
    store.register({name: _as_idl(fields) for name, fields in jazzy.fielddefs.items()})
    store.register({_as_idl(name): _as_idl(fields) for name, fields in _service_types().items()})
    return store


def type_hash(type_name: str) -> str:
    return typestore().hash_rihs01(type_name)


def wire_bytes(service: str, kind: str, guid: int, seq: int, **fields: Any) -> bytes:
    """The CDR sample rmw_cyclonedds sends for `service`'s Request or Response."""
    store = typestore()
    cls = store.types[f"wire_test/msg/{service}_{kind}"]
    return bytes(store.serialize_cdr(cls(guid=guid, seq=seq, **fields), cls.__msgtype__))
