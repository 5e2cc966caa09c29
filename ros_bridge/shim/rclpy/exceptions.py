"""rclpy's exception types for what the shim checks (names and bases as in rclpy.exceptions)."""

from __future__ import annotations

from typing import Any


class NotInitializedException(Exception):
    def __init__(self, *args: Any) -> None:
        super().__init__("rclpy.init() has not been called", *args)


class RCLError(RuntimeError):
    """An operation on a destroyed entity or a shut-down context (rclpy raises RCLError too)."""


class InvalidNodeNameException(ValueError):
    pass


class InvalidNamespaceException(ValueError):
    pass


class InvalidTopicNameException(ValueError):
    pass


class InvalidParameterException(Exception):
    pass


class ParameterException(Exception):
    def __init__(self, error_msg: str, parameters: Any, *args: Any) -> None:
        super().__init__(f"{error_msg}: {parameters}", *args)


class ParameterNotDeclaredException(ParameterException):
    def __init__(self, parameters: Any, *args: Any) -> None:
        super().__init__("Invalid access to undeclared parameter(s)", parameters, *args)


class ParameterAlreadyDeclaredException(ParameterException):
    def __init__(self, parameters: Any, *args: Any) -> None:
        super().__init__("Parameter(s) already declared", parameters, *args)


class ParameterImmutableException(ParameterException):
    def __init__(self, parameters: Any, *args: Any) -> None:
        super().__init__("Attempted to modify read-only parameter", parameters, *args)


class ParameterUninitializedException(ParameterException):
    def __init__(self, parameter_name: str, *args: Any) -> None:
        super().__init__("The parameter is uninitialized (statically typed)", parameter_name, *args)


class InvalidParameterValueException(ParameterException):
    def __init__(self, parameter: str, value: Any, reason: str, *args: Any) -> None:
        super().__init__(
            f"Invalid parameter value ({value}) for parameter. Reason: {reason}", parameter, *args
        )


class InvalidParameterTypeException(ParameterException):
    def __init__(self, desired_parameter: Any, expected_type: str, *args: Any) -> None:
        super().__init__(
            f"Trying to set parameter to '{desired_parameter.value}' of type "
            f"'{desired_parameter.type_.name}', expecting type '{expected_type}'",
            desired_parameter.name,
            *args,
        )
