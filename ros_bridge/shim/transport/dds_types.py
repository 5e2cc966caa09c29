"""DDS topic types for the shim's messages, named and shaped as ROS 2 names and shapes them.

Each message class gets a `cyclonedds` IdlStruct twin with the ROS 2 DDS type name
(`sensor_msgs::msg::dds_::Image_`), final extensibility and no key, so discovery advertises what
rmw_cyclonedds advertises. The twin only describes the type: a sample crosses `cyclonedds` as the
CDR bytes `ros_bridge.shim.cdr` produced (byte-equal to rosbags'), which the twin's
`serialize`/`deserialize` hand through unchanged. That skips cyclonedds' per-element Python
packing of `uint8[]`, ~40 ms for a VGA frame. A service's request and reply types carry
rmw_cyclonedds' request header (`uint64 guid`, `int64 seq`) in front of the message's fields.
"""

from __future__ import annotations

import functools
from typing import Any

from cyclonedds.idl import IdlStruct, annotations, make_idl_struct
from cyclonedds.idl import types as idl

from ros_bridge.shim.fields import Array, FieldType, Primitive, Sequence
from ros_bridge.shim.graph import dds_type_name
from ros_bridge.shim.message import Message

_IDL_PRIMITIVES: dict[str, Any] = {
    "bool": bool,
    "byte": idl.byte,
    "int8": idl.int8,
    "uint8": idl.uint8,
    "int16": idl.int16,
    "uint16": idl.uint16,
    "int32": idl.int32,
    "uint32": idl.uint32,
    "int64": idl.int64,
    "uint64": idl.uint64,
    "float32": idl.float32,
    "float64": idl.float64,
    "string": str,
}


def typehash(interface: Any) -> str:
    """The USER_DATA entry Iron+ endpoints carry: `typehash=RIHS01_...;`."""
    return f"typehash={interface._type_hash_};"


def delete_entity(entity: Any) -> None:
    # cyclonedds deletes an entity in __del__, which is idempotent; call it now rather than
    # whenever the garbage collector breaks the listener's reference cycle.
    entity.__del__()


def wrap(twin: type[IdlStruct], payload: bytes | None) -> Any:
    """A sample of `twin` that is just its serialized bytes (None: a key-only sample)."""
    sample = object.__new__(twin)
    sample.payload = payload
    return sample


def _serialize(
    self: Any, buffer: Any = None, endianness: Any = None, use_version_2: Any = None
) -> bytes:
    if self.payload is None:
        raise ValueError("a key-only sample has no data")
    return self.payload


def _deserialize(
    cls: type[IdlStruct], data: bytes, has_header: bool = True, use_version_2: Any = None
) -> Any:
    return wrap(cls, bytes(data))


def _deserialize_key(
    cls: type[IdlStruct], data: bytes, has_header: bool = True, use_version_2: Any = None
) -> Any:
    return wrap(cls, None)  # instance-state notices of a keyless topic carry no data


@functools.cache
def dds_twin(msg_type: type[Message], service_header: bool = False) -> type[IdlStruct]:
    """The IdlStruct twin of `msg_type` (cached: one per message class), with rmw_cyclonedds'
    request header first for a service's request or reply."""
    fields = {"guid": idl.uint64, "seq": idl.int64} if service_header else {}
    fields |= {name: _idl_type(ftype) for name, ftype in msg_type._field_types_.items()}
    twin = make_idl_struct(f"{msg_type.__name__}_", dds_type_name(msg_type._type_name_), fields)
    # Set on the class, not inherited: cyclonedds would describe a base class as IDL inheritance.
    twin.serialize = _serialize  # type: ignore[method-assign]
    twin.deserialize = classmethod(_deserialize)  # type: ignore[method-assign,assignment]
    twin.deserialize_key = classmethod(_deserialize_key)  # type: ignore[method-assign,assignment]
    return annotations.final(twin)


def _idl_type(ftype: FieldType) -> Any:
    if isinstance(ftype, Primitive) and ftype.bound:
        return idl.bounded_str[ftype.bound]
    if isinstance(ftype, Primitive):
        return _IDL_PRIMITIVES[ftype.name]
    if isinstance(ftype, Array):
        return idl.array[_idl_type(ftype.element), ftype.length]
    if isinstance(ftype, Sequence):
        inner = _idl_type(ftype.element)
        return idl.sequence[inner, ftype.max_len] if ftype.max_len else idl.sequence[inner]
    return dds_twin(ftype)
