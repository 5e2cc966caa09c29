"""ROS 2 field types of the shim's messages and the value checks rosidl's Python setters make.

Values take the Python types `rosidl_generator_py` gives them: numeric sequences are
`array.array`, `byte` is a length-1 `bytes`, `string` is `str`, nested messages are instances.
"""

from __future__ import annotations

import array
import math
from collections import UserList
from collections.abc import Sequence as AbcSequence
from collections.abc import Set as AbcSet
from dataclasses import dataclass
from typing import Any

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
            return isinstance(value, str)
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


FieldType = Primitive | Sequence | MessageType


def seq(element: str | MessageType, max_len: int | None = None) -> Sequence:
    """The sequence type of `element`, given as a primitive name or a message class."""
    return Sequence(PRIMITIVES[element] if isinstance(element, str) else element, max_len)


def default_value(ftype: FieldType) -> Any:
    if isinstance(ftype, Primitive | Sequence):
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
    if not isinstance(value, ftype):
        raise FieldValueError(
            f"The '{field}' field must be a sub message of type '{ftype.__name__}'"
        )
    return value


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
