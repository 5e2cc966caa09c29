"""ROS 2 field types of the shim's messages and the value checks rosidl's Python setters make.

Values take the Python types `rosidl_generator_py` gives them: numeric sequences are
`array.array`, fixed-size numeric arrays are numpy arrays, `byte` is a length-1 `bytes`, `string`
is `str` (`string<=N` at most N characters), nested messages are instances.
"""

from __future__ import annotations

import array
import math
from collections import UserList
from collections.abc import Sequence as AbcSequence
from collections.abc import Set as AbcSet
from dataclasses import dataclass
from typing import Any

import numpy as np

# A message class (a subclass of ros_bridge.shim.message.Message, which is built on this module):
# here it is only constructed, isinstance-checked and named.
MessageType = type


class FieldValueError(AssertionError, TypeError):
    """A value a message field rejects.

    rosidl's setters raise AssertionError; TypeError is what Python code expects, so both match.
    """


@dataclass(frozen=True)
class Primitive:
    """A ROS 2 primitive type: its CDR size (= alignment) and `array`/`struct` code."""

    name: str
    code: str  # struct code; also the array.array typecode for numeric types
    size: int
    low: float = 0
    high: float = 0
    bound: int = 0  # string<=bound (0: unbounded)

    @property
    def is_float(self) -> bool:
        return self.code in ("f", "d")

    @property
    def is_integer(self) -> bool:
        return self.code in ("b", "B", "h", "H", "i", "I", "q", "Q")

    def default(self) -> Any:
        if self.name == "string":
            return ""
        if self.name == "bool":
            return False
        if self.name == "byte":
            return b"\x00"
        return 0.0 if self.is_float else 0

    def check(self, value: Any) -> bool:
        if self.name == "string":
            return isinstance(value, str) and not (self.bound and len(value) > self.bound)
        if self.name == "bool":
            return isinstance(value, bool)
        if self.name == "byte":
            return isinstance(value, bytes | bytearray) and len(value) == 1
        if self.is_float:
            return isinstance(value, float) and (
                self.low <= value <= self.high or math.isinf(value) or math.isnan(value)
            )
        return isinstance(value, int) and self.low <= value <= self.high


_F32_MAX = 3.4028234663852886e38
_F64_MAX = 1.7976931348623157e308

PRIMITIVES: dict[str, Primitive] = {
    p.name: p
    for p in (
        Primitive("bool", "?", 1),
        Primitive("byte", "c", 1),
        Primitive("char", "B", 1, 0, 255),
        Primitive("int8", "b", 1, -(2**7), 2**7 - 1),
        Primitive("uint8", "B", 1, 0, 2**8 - 1),
        Primitive("int16", "h", 2, -(2**15), 2**15 - 1),
        Primitive("uint16", "H", 2, 0, 2**16 - 1),
        Primitive("int32", "i", 4, -(2**31), 2**31 - 1),
        Primitive("uint32", "I", 4, 0, 2**32 - 1),
        Primitive("int64", "q", 8, -(2**63), 2**63 - 1),
        Primitive("uint64", "Q", 8, 0, 2**64 - 1),
        Primitive("float32", "f", 4, -_F32_MAX, _F32_MAX),
        Primitive("float64", "d", 8, -_F64_MAX, _F64_MAX),
        Primitive("string", "", 4),
    )
}


@dataclass(frozen=True)
class Sequence:
    """`T[]` (unbounded) or `T[<=N]` (bounded) of a primitive or a message type."""

    element: Primitive | MessageType
    max_len: int | None = None

    @property
    def is_numeric(self) -> bool:
        return isinstance(self.element, Primitive) and (
            self.element.is_integer or self.element.is_float
        )

    def default(self) -> Any:
        return array.array(self.element.code) if self.is_numeric else []  # type: ignore[union-attr]


@dataclass(frozen=True)
class Array:
    """`T[N]`: exactly `length` numeric elements, a numpy array as rosidl makes it."""

    element: Primitive
    length: int

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.element.code)

    def default(self) -> Any:
        return np.zeros(self.length, self.dtype)


FieldType = Primitive | Sequence | Array | MessageType


def bounded_string(bound: int) -> Primitive:
    """`string<=bound`: encoded as any string; longer values are rejected."""
    return Primitive("string", "", 4, bound=bound)


def fixed_array(element: str, length: int) -> Array:
    """`element[length]` of a numeric primitive (`char` is uint8, as rosidl_adapter maps it)."""
    return Array(PRIMITIVES["uint8" if element == "char" else element], length)


def seq(element: str | MessageType, max_len: int | None = None) -> Sequence:
    """The sequence type of `element`, given as a primitive name or a message class."""
    return Sequence(PRIMITIVES[element] if isinstance(element, str) else element, max_len)


def default_value(ftype: FieldType) -> Any:
    if isinstance(ftype, Primitive | Sequence | Array):
        return ftype.default()
    return ftype()


def coerce(ftype: FieldType, value: Any, field: str) -> Any:
    """`value` as stored in a field of type `ftype`, or FieldValueError (rosidl's setter rules)."""
    if isinstance(ftype, Primitive):
        if not ftype.check(value):
            raise FieldValueError(f"The '{field}' field must be of type '{ftype.name}'")
        return bytes(value) if ftype.name == "byte" else value
    if isinstance(ftype, Sequence):
        return _coerce_sequence(ftype, value, field)
    if isinstance(ftype, Array):
        return _coerce_array(ftype, value, field)
    if not isinstance(value, ftype):
        raise FieldValueError(
            f"The '{field}' field must be a sub message of type '{ftype.__name__}'"
        )
    return value


def _coerce_array(ftype: Array, value: Any, field: str) -> Any:
    if isinstance(value, bytes | bytearray) and ftype.dtype.itemsize == 1:
        value = np.frombuffer(value, ftype.dtype)
    if not isinstance(value, np.ndarray | list | tuple) or len(value) != ftype.length:
        raise FieldValueError(f"The '{field}' field must be a sequence with length {ftype.length}")
    items = value.tolist() if isinstance(value, np.ndarray) else list(value)
    if not all(ftype.element.check(v) for v in items):
        raise FieldValueError(f"The '{field}' field values must be of type '{ftype.element.name}'")
    return np.array(items, ftype.dtype)


def _coerce_sequence(ftype: Sequence, value: Any, field: str) -> Any:
    stored = _sequence_value(ftype, value, field)
    if ftype.max_len is not None and len(stored) > ftype.max_len:
        raise FieldValueError(f"The '{field}' field must have at most {ftype.max_len} elements")
    return stored


def _sequence_value(ftype: Sequence, value: Any, field: str) -> Any:
    element = ftype.element
    if ftype.is_numeric:
        code = element.code  # type: ignore[union-attr]
        if isinstance(value, array.array):
            if value.typecode != code:
                raise FieldValueError(
                    f"The '{field}' array.array() must have the type code '{code}'"
                )
            return value  # rosidl keeps the caller's array object, as here
        if code == "B" and isinstance(value, bytes | bytearray | memoryview):
            # Images: one memcpy instead of a per-element check of ~1M ints.
            stored = array.array("B")
            stored.frombytes(value)
            return stored
    if not _is_sequence(value):
        raise FieldValueError(f"The '{field}' field must be a set or sequence")
    items = list(value)
    if isinstance(element, Primitive):
        if not all(element.check(v) for v in items):
            raise FieldValueError(f"The '{field}' field values must be of type '{element.name}'")
        if ftype.is_numeric:
            return array.array(element.code, items)
        return [bytes(v) for v in items] if element.name == "byte" else items
    if not all(isinstance(v, element) for v in items):
        raise FieldValueError(f"The '{field}' field values must be of type '{element.__name__}'")
    return items


def _is_sequence(value: Any) -> bool:
    return isinstance(value, AbcSequence | AbcSet | UserList) and not isinstance(value, str)
