"""rclpy.parameter.Parameter: a named, typed parameter value (rclpy's type inference rules), and
its rcl_interfaces/msg form (what parameter services and /parameter_events carry)."""

from __future__ import annotations

import array
from enum import Enum
from typing import Any

from ros_bridge.shim.rcl_interfaces.msg import Parameter as ParameterMsg
from ros_bridge.shim.rcl_interfaces.msg import ParameterType, ParameterValue

# ParameterValue's field for each type (rcl_interfaces/msg/ParameterValue.msg)
_VALUE_FIELDS = {
    ParameterType.PARAMETER_BOOL: "bool_value",
    ParameterType.PARAMETER_INTEGER: "integer_value",
    ParameterType.PARAMETER_DOUBLE: "double_value",
    ParameterType.PARAMETER_STRING: "string_value",
    ParameterType.PARAMETER_BYTE_ARRAY: "byte_array_value",
    ParameterType.PARAMETER_BOOL_ARRAY: "bool_array_value",
    ParameterType.PARAMETER_INTEGER_ARRAY: "integer_array_value",
    ParameterType.PARAMETER_DOUBLE_ARRAY: "double_array_value",
    ParameterType.PARAMETER_STRING_ARRAY: "string_array_value",
}


def _is_list(value: Any, *, allow_array: bool = False) -> bool:
    kinds: tuple[type, ...] = (list, tuple, array.array) if allow_array else (list, tuple)
    return isinstance(value, kinds)


class Parameter:
    """`Parameter(name, value=v)` infers the type of `v`; `Parameter(name, type_, v)` checks it."""

    class Type(Enum):
        NOT_SET = ParameterType.PARAMETER_NOT_SET
        BOOL = ParameterType.PARAMETER_BOOL
        INTEGER = ParameterType.PARAMETER_INTEGER
        DOUBLE = ParameterType.PARAMETER_DOUBLE
        STRING = ParameterType.PARAMETER_STRING
        BYTE_ARRAY = ParameterType.PARAMETER_BYTE_ARRAY
        BOOL_ARRAY = ParameterType.PARAMETER_BOOL_ARRAY
        INTEGER_ARRAY = ParameterType.PARAMETER_INTEGER_ARRAY
        DOUBLE_ARRAY = ParameterType.PARAMETER_DOUBLE_ARRAY
        STRING_ARRAY = ParameterType.PARAMETER_STRING_ARRAY

        @classmethod
        def from_parameter_value(cls, value: Any) -> Parameter.Type:
            """The type rclpy infers; note an empty list is a BYTE_ARRAY, as in rclpy."""
            if value is None:
                return cls.NOT_SET
            for scalar, kind in (
                (bool, cls.BOOL),
                (int, cls.INTEGER),
                (float, cls.DOUBLE),
                (str, cls.STRING),
            ):
                if isinstance(value, scalar):
                    return kind
            if _is_list(value, allow_array=True):
                for element, kind in (
                    (bytes, cls.BYTE_ARRAY),
                    (bool, cls.BOOL_ARRAY),
                    (int, cls.INTEGER_ARRAY),
                    (float, cls.DOUBLE_ARRAY),
                    (str, cls.STRING_ARRAY),
                ):
                    if all(isinstance(v, element) for v in value):
                        return kind
                raise TypeError(
                    f"The given value is not a list of one of the allowed types '{value}'."
                )
            raise TypeError(f"The given value is not one of the allowed types '{value}'.")

        def check(self, value: Any) -> bool:
            cls = type(self)
            if self is cls.NOT_SET:
                return value is None
            scalars = {cls.BOOL: bool, cls.INTEGER: int, cls.DOUBLE: float, cls.STRING: str}
            if self in scalars:
                return isinstance(value, scalars[self])
            if self is cls.BYTE_ARRAY:
                return _is_list(value) and all(isinstance(v, bytes) and len(v) == 1 for v in value)
            elements = {
                cls.BOOL_ARRAY: bool,
                cls.INTEGER_ARRAY: int,
                cls.DOUBLE_ARRAY: float,
                cls.STRING_ARRAY: str,
            }
            numeric = self in (cls.INTEGER_ARRAY, cls.DOUBLE_ARRAY)
            return _is_list(value, allow_array=numeric) and all(
                isinstance(v, elements[self]) for v in value
            )

    def __init__(self, name: str, type_: Parameter.Type | None = None, value: Any = None) -> None:
        if type_ is None:
            type_ = Parameter.Type.from_parameter_value(value)
        if not isinstance(type_, Parameter.Type):
            raise TypeError(f"type must be an instance of '{Parameter.Type!r}'")
        if not type_.check(value):
            raise ValueError(f"Type '{type_}' and value '{value}' do not agree")
        self._name = name
        self._type_ = type_
        self._value = value

    @property
    def name(self) -> str:
        return self._name

    @property
    def type_(self) -> Parameter.Type:
        return self._type_

    @property
    def value(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return f"Parameter(name={self._name!r}, type_={self._type_}, value={self._value!r})"

    def get_parameter_value(self) -> ParameterValue:
        msg = ParameterValue(type=self._type_.value)
        field = _VALUE_FIELDS.get(self._type_.value)
        if field is not None:
            setattr(msg, field, self._value)
        return msg

    def to_parameter_msg(self) -> ParameterMsg:
        return ParameterMsg(name=self._name, value=self.get_parameter_value())

    @classmethod
    def from_parameter_msg(cls, param_msg: ParameterMsg) -> Parameter:
        value = parameter_value_to_python(param_msg.value)
        return cls(param_msg.name, Parameter.Type(param_msg.value.type), value)


def parameter_value_to_python(parameter_value: ParameterValue) -> Any:
    """The Python value a ParameterValue holds (None for NOT_SET)."""
    if parameter_value.type == ParameterType.PARAMETER_NOT_SET:
        return None
    field = _VALUE_FIELDS.get(parameter_value.type)
    if field is None:
        raise RuntimeError(f"unexpected parameter type {parameter_value.type}")
    return getattr(parameter_value, field)
