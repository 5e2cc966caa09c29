"""rcl_interfaces/msg: parameters (values, descriptors, events, results) and /rosout's Log."""

from __future__ import annotations

from ros_bridge.shim.builtin_interfaces.msg import Time
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


class ParameterValue(Message):
    """A parameter value: `type` (a ParameterType constant) says which field holds it."""

    _type_name_ = "rcl_interfaces/msg/ParameterValue"
    _type_hash_ = "RIHS01_115fc089a387e23c7ecd3525c9189c379109119d6ab82e8dfbde0fdf6a7f9b68"
    _fields_ = (
        ("type", "uint8"),
        ("bool_value", "bool"),
        ("integer_value", "int64"),
        ("double_value", "float64"),
        ("string_value", "string"),
        ("byte_array_value", seq("byte")),
        ("bool_array_value", seq("bool")),
        ("integer_array_value", seq("int64")),
        ("double_array_value", seq("float64")),
        ("string_array_value", seq("string")),
    )


class Parameter(Message):
    _type_name_ = "rcl_interfaces/msg/Parameter"
    _type_hash_ = "RIHS01_ddfe6442cffc462317adb5c92536a7b6dd55858c5c3e1e328165a6b73c2831af"
    _fields_ = (("name", "string"), ("value", ParameterValue))


class ParameterEvent(Message):
    """What a node publishes on /parameter_events whenever its parameters change."""

    _type_name_ = "rcl_interfaces/msg/ParameterEvent"
    _type_hash_ = "RIHS01_043e627780fcad87a22d225bc2a037361dba713fca6a6b9f4b869a5aa0393204"
    _fields_ = (
        ("stamp", Time),
        ("node", "string"),
        ("new_parameters", seq(Parameter)),
        ("changed_parameters", seq(Parameter)),
        ("deleted_parameters", seq(Parameter)),
    )


class ListParametersResult(Message):
    _type_name_ = "rcl_interfaces/msg/ListParametersResult"
    _type_hash_ = "RIHS01_237ae3428413dcbcfb452b510c42355f3a2b021dc091afa3e18526d57022f1cd"
    _fields_ = (("names", seq("string")), ("prefixes", seq("string")))


class Log(Message):
    """One log line on /rosout; the level constants are `byte`s, as rclpy makes them."""

    DEBUG = b"\x0a"
    INFO = b"\x14"
    WARN = b"\x1e"
    ERROR = b"\x28"
    FATAL = b"\x32"

    _type_name_ = "rcl_interfaces/msg/Log"
    _type_hash_ = "RIHS01_e28ce254ca8abc06abf92773b74602cdbf116ed34fbaf294fb9f81da9f318eac"
    _fields_ = (
        ("stamp", Time),
        ("level", "uint8"),
        ("name", "string"),
        ("msg", "string"),
        ("file", "string"),
        ("function", "string"),
        ("line", "uint32"),
    )
