"""rcl_interfaces/msg: the parameter descriptor and set-parameters result a node uses."""

from __future__ import annotations

from ros_bridge.shim.fields import seq
from ros_bridge.shim.message import Message


class ParameterType(Message):
    """Constants only; the dummy field is what rosidl generates for an empty message."""

    PARAMETER_NOT_SET = 0
    PARAMETER_BOOL = 1
    PARAMETER_INTEGER = 2
    PARAMETER_DOUBLE = 3
    PARAMETER_STRING = 4
    PARAMETER_BYTE_ARRAY = 5
    PARAMETER_BOOL_ARRAY = 6
    PARAMETER_INTEGER_ARRAY = 7
    PARAMETER_DOUBLE_ARRAY = 8
    PARAMETER_STRING_ARRAY = 9

    _type_name_ = "rcl_interfaces/msg/ParameterType"
    _type_hash_ = "RIHS01_df29ed057a834862187be24dd187d981790ff3ea6502f4cd27b432cbc42c6d46"
    _fields_ = (("structure_needs_at_least_one_member", "uint8"),)


class FloatingPointRange(Message):
    _type_name_ = "rcl_interfaces/msg/FloatingPointRange"
    _type_hash_ = "RIHS01_e6af23a23c177fee5f3075c8b1e435162a9b63c863d78c06017460b49684262d"
    _fields_ = (("from_value", "float64"), ("to_value", "float64"), ("step", "float64"))


class IntegerRange(Message):
    _type_name_ = "rcl_interfaces/msg/IntegerRange"
    _type_hash_ = "RIHS01_f7b7fdc0f65f07702e099218e13288c3963bcb9345bde78b560e6cd19800fc5a"
    _fields_ = (("from_value", "int64"), ("to_value", "int64"), ("step", "uint64"))


class ParameterDescriptor(Message):
    _type_name_ = "rcl_interfaces/msg/ParameterDescriptor"
    _type_hash_ = "RIHS01_52175dbfda6c51153101d33d2a9da05743f66f02d5ab2ca9ec4709b46b73d704"
    _fields_ = (
        ("name", "string"),
        ("type", "uint8"),
        ("description", "string"),
        ("additional_constraints", "string"),
        ("read_only", "bool"),
        ("dynamic_typing", "bool"),
        ("floating_point_range", seq(FloatingPointRange, 1)),
        ("integer_range", seq(IntegerRange, 1)),
    )


class SetParametersResult(Message):
    _type_name_ = "rcl_interfaces/msg/SetParametersResult"
    _type_hash_ = "RIHS01_cfcc0fb0371ee5159b403960ef4300f8f9d2f1fd6117c8666b7f9654d528a9b1"
    _fields_ = (("successful", "bool"), ("reason", "string"))
