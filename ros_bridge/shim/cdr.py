"""XCDR1 (plain CDR) encoding of the shim's messages, as ROS 2 puts them on the wire and in bags.

A sample is the 4-byte encapsulation header (`00 01 00 00`: CDR little-endian) followed by the
fields in declaration order, each primitive aligned to its size counted from the end of the
header; strings and sequences carry a uint32 length (strings count their NUL terminator). An empty
sequence adds no padding for its element type; a fixed-size array has no length, only its elements.
Numeric sequences are copied as one buffer, so a VGA image costs one memcpy each way, not a
million Python calls.
"""

from __future__ import annotations

import array
import struct
import sys
from typing import Any, TypeVar

import numpy as np

from ros_bridge.shim.fields import Array, FieldType, Primitive, Sequence
from ros_bridge.shim.message import Message

M = TypeVar("M", bound=Message)

CDR_LE = b"\x00\x01\x00\x00"
CDR_BE = b"\x00\x00\x00\x00"
_NATIVE_LE = sys.byteorder == "little"
_U32 = {"<": struct.Struct("<I"), ">": struct.Struct(">I")}


class CdrError(ValueError):
    """Bytes that are not a CDR sample of the requested type."""


def serialize_message(msg: Message) -> bytes:
    """`msg` as a CDR little-endian sample (with encapsulation header), like rmw and rosbags."""
    writer = _Writer()
    writer.fields(msg)
    return b"".join(writer.parts)  # one copy of each array, straight from its buffer


def deserialize_message(data: bytes | bytearray | memoryview, msg_type: type[M]) -> M:
    """The message of type `msg_type` in a CDR sample; trailing padding is ignored."""
    view = memoryview(data).cast("B")
    header = bytes(view[:4])
    if header[:2] not in (CDR_LE[:2], CDR_BE[:2]):
        raise CdrError(f"not a plain CDR sample (encapsulation {header.hex()})")
    reader = _Reader(view, "<" if header[1] == 1 else ">")
    try:
        return reader.message(msg_type)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CdrError(f"malformed {msg_type._type_name_} sample: {exc}") from exc


class _Writer:
    """Collects a sample's pieces; `size` is the byte count so far, header included."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[Any] = [CDR_LE]
        self.size = len(CDR_LE)

    def put(self, chunk: Any, nbytes: int) -> None:
        self.parts.append(chunk)
        self.size += nbytes

    def align(self, alignment: int) -> None:
        pad = (4 - self.size) % alignment  # offsets count from the end of the 4-byte header
        if pad:
            self.put(bytes(pad), pad)

    def fields(self, msg: Message) -> None:
        for field, ftype in msg._field_types_.items():
            self.value(ftype, getattr(msg, field))

    def value(self, ftype: FieldType, value: Any) -> None:
        if isinstance(ftype, Primitive):
            self.primitive(ftype, value)
        elif isinstance(ftype, Sequence):
            self.sequence(ftype, value)
        elif isinstance(ftype, Array):
            self.align(ftype.element.size)
            self.put(
                np.asarray(value, ftype.dtype.newbyteorder("<")).tobytes(),
                ftype.length * ftype.element.size,
            )
        else:
            self.fields(value)

    def primitive(self, ftype: Primitive, value: Any) -> None:
        if ftype.name == "string":
            encoded = value.encode() + b"\x00"
            self.align(4)
            self.put(_U32["<"].pack(len(encoded)), 4)
            self.put(encoded, len(encoded))
            return
        self.align(ftype.size)
        self.put(struct.pack("<" + ftype.code, value), ftype.size)

    def sequence(self, ftype: Sequence, values: Any) -> None:
        self.align(4)
        self.put(_U32["<"].pack(len(values)), 4)
        if not len(values):
            return
        element = ftype.element
        if ftype.is_numeric:
            size = element.size  # type: ignore[union-attr]
            self.align(size)
            if not _NATIVE_LE and size > 1:
                values = array.array(values.typecode, values)
                values.byteswap()
            self.put(values, len(values) * size)
        elif isinstance(element, Primitive) and element.name in ("bool", "byte"):
            self.put(struct.pack(f"<{len(values)}{element.code}", *values), len(values))
        else:
            for value in values:
                self.value(element, value)


class _Reader:
    """A cursor over one sample; `order` is the struct byte-order prefix."""

    __slots__ = ("order", "pos", "view")

    def __init__(self, view: memoryview, order: str) -> None:
        self.view = view
        self.order = order
        self.pos = 4

    def align(self, size: int) -> None:
        self.pos += (4 - self.pos) % size

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.view):
            raise struct.error(f"needs {end} bytes, sample has {len(self.view)}")
        chunk = self.view[self.pos : end]
        self.pos = end
        return chunk

    def message(self, msg_type: type[M]) -> M:
        msg = msg_type.__new__(msg_type)
        for field, ftype in msg_type._field_types_.items():
            object.__setattr__(msg, field, self.value(ftype))  # decoded values are well typed
        return msg

    def value(self, ftype: FieldType) -> Any:
        if isinstance(ftype, Primitive):
            return self.primitive(ftype)
        if isinstance(ftype, Sequence):
            return self.sequence(ftype)
        if isinstance(ftype, Array):
            self.align(ftype.element.size)
            raw = self.take(ftype.length * ftype.element.size)
            return np.frombuffer(raw, ftype.dtype.newbyteorder(self.order)).astype(ftype.dtype)
        return self.message(ftype)

    def primitive(self, ftype: Primitive) -> Any:
        if ftype.name == "string":
            self.align(4)
            (length,) = _U32[self.order].unpack(self.take(4))
            if length == 0:
                raise struct.error("string without terminator")
            return str(self.take(length)[:-1], "utf-8")
        self.align(ftype.size)
        (value,) = struct.unpack(self.order + ftype.code, self.take(ftype.size))
        return value

    def sequence(self, ftype: Sequence) -> Any:
        self.align(4)
        (count,) = _U32[self.order].unpack(self.take(4))
        element = ftype.element
        if ftype.is_numeric:
            values = array.array(element.code)  # type: ignore[union-attr]
            if count:
                self.align(element.size)  # type: ignore[union-attr]
                values.frombytes(self.take(count * element.size))  # type: ignore[union-attr]
                if (self.order == "<") != _NATIVE_LE and element.size > 1:  # type: ignore[union-attr]
                    values.byteswap()
            return values
        if isinstance(element, Primitive) and element.name in ("bool", "byte"):
            return list(struct.unpack(f"{count}{element.code}", self.take(count)))
        return [self.value(element) for _ in range(count)]
