"""Base classes of the shim's interface types: messages (rosidl-like construction, checked fields,
equality) and services (a request and a response message)."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, ClassVar

import numpy as np

from ros_bridge.shim.fields import (
    PRIMITIVES,
    Array,
    FieldType,
    FieldValueError,
    Primitive,
    Sequence,
    coerce,
    default_value,
)

_REGISTRY: dict[str, type[Message]] = {}


class _MessageMeta(type):
    """Turns a class's `_fields_` into `__slots__` so a message has no stray attributes."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
        declared = namespace.get("_fields_", ())
        namespace["__slots__"] = tuple(field for field, _ in declared)
        namespace["_field_types_"] = {
            field: PRIMITIVES[ftype] if isinstance(ftype, str) else ftype
            for field, ftype in declared
        }
        cls = super().__new__(mcs, name, bases, namespace)
        if namespace.get("_type_name_"):
            _REGISTRY[namespace["_type_name_"]] = cls  # type: ignore[assignment]
        return cls


class Message(metaclass=_MessageMeta):
    """A ROS 2 message: keyword construction, rosidl's type checks on every assignment."""

    _type_name_: ClassVar[str] = ""  # "sensor_msgs/msg/Image"
    _type_hash_: ClassVar[str] = ""  # RIHS01 hash, as ROS 2 Iron+ advertises it
    _fields_: ClassVar[tuple[tuple[str, Any], ...]] = ()
    _field_types_: ClassVar[dict[str, FieldType]]

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self._field_types_)
        if unknown:
            raise FieldValueError(f"Invalid arguments passed to constructor: {sorted(unknown)}")
        for field, ftype in self._field_types_.items():
            setattr(self, field, kwargs[field] if field in kwargs else default_value(ftype))

    def __setattr__(self, name: str, value: Any) -> None:
        ftype = self._field_types_.get(name)
        if ftype is None:
            raise AttributeError(f"'{type(self).__name__}' message has no field '{name}'")
        object.__setattr__(self, name, coerce(ftype, value, name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return False
        return all(_same(getattr(self, f), getattr(other, f)) for f in self._field_types_)

    __hash__ = None  # type: ignore[assignment]  # mutable, as rosidl's messages

    def __repr__(self) -> str:
        pkg, kind, name = self._type_name_.split("/")
        body = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._field_types_)
        return f"{pkg}.{kind}.{name}({body})"

    @classmethod
    def get_fields_and_field_types(cls) -> dict[str, str]:
        """Field name -> rosidl's type string, e.g. {'data': 'sequence<uint8>'}."""
        return {field: _type_string(ftype) for field, ftype in cls._field_types_.items()}


class ServiceType:
    """A ROS 2 service: `Request` and `Response` message classes, as rosidl generates them."""

    _type_name_: ClassVar[str] = ""  # "rcl_interfaces/srv/GetParameters"
    _type_hash_: ClassVar[str] = ""
    Request: ClassVar[type[Message]]
    Response: ClassVar[type[Message]]


def service_type(
    type_name: str,
    request: tuple[tuple[str, Any], ...],
    response: tuple[tuple[str, Any], ...],
    hashes: tuple[str, str, str],
    request_constants: dict[str, Any] | None = None,
) -> type[ServiceType]:
    """The service `type_name` ('pkg/srv/Name') with its `Name_Request` and `Name_Response`
    messages; `hashes` are the RIHS01 hashes of the service, its request and its response."""
    name = type_name.rsplit("/", 1)[1]

    def part(suffix: str, fields: tuple[tuple[str, Any], ...], type_hash: str, extra: dict) -> Any:
        namespace = {"_type_name_": f"{type_name}_{suffix}", "_type_hash_": type_hash}
        namespace |= {"_fields_": fields, "__qualname__": f"{name}_{suffix}", **extra}
        return _MessageMeta(f"{name}_{suffix}", (Message,), namespace)

    namespace = {
        "_type_name_": type_name,
        "_type_hash_": hashes[0],
        "Request": part("Request", request, hashes[1], request_constants or {}),
        "Response": part("Response", response, hashes[2], {}),
    }
    return type(name, (ServiceType,), namespace)


def _same(mine: Any, theirs: Any) -> bool:
    if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
        return bool(np.array_equal(mine, theirs))
    return bool(mine == theirs)


def _type_string(ftype: FieldType) -> str:
    if isinstance(ftype, Primitive) and ftype.bound:
        return f"string<{ftype.bound}>"
    if isinstance(ftype, Array):
        return f"{_type_string(ftype.element)}[{ftype.length}]"
    if isinstance(ftype, Primitive):
        return {"float32": "float", "float64": "double", "byte": "octet"}.get(
            ftype.name, ftype.name
        )
    if isinstance(ftype, Sequence):
        inner = _type_string(ftype.element)
        return f"sequence<{inner}, {ftype.max_len}>" if ftype.max_len else f"sequence<{inner}>"
    pkg, _, name = ftype._type_name_.split("/")
    return f"{pkg}/{name}"


def message_class(type_name: str) -> type[Message]:
    """The shim class for a ROS type name such as 'sensor_msgs/msg/Image'."""
    if type_name not in _REGISTRY:
        pkg, _, kind = type_name.partition("/")
        kind = kind.split("/")[0]
        if pkg.isidentifier() and kind in ("msg", "srv"):
            with contextlib.suppress(ModuleNotFoundError):
                importlib.import_module(f"ros_bridge.shim.{pkg}.{kind}")
    try:
        return _REGISTRY[type_name]
    except KeyError:
        raise ValueError(f"the shim has no message type {type_name!r}") from None
