"""The parameter half of rclpy's Node: declaration, overrides, typed set, callbacks.

Semantics follow rclpy (Jazzy): a parameter's type is fixed by its default unless the
descriptor asks for dynamic typing; overrides (command line, `parameter_overrides`) win over
defaults; on-set callbacks may veto a change; `set_parameters` sets one parameter at a time; every
change (a declaration too) is published on /parameter_events when the node has that publisher.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from ros_bridge.shim.rcl_interfaces.msg import (
    ListParametersResult,
    ParameterDescriptor,
    ParameterEvent,
    ParameterType,
    SetParametersResult,
)
from ros_bridge.shim.rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterAlreadyDeclaredException,
    ParameterImmutableException,
    ParameterNotDeclaredException,
    ParameterUninitializedException,
)
from ros_bridge.shim.rclpy.parameter import Parameter

OnSetCallback = Callable[[list[Parameter]], SetParametersResult]
PARAM_REL_TOL = 1e-6


def _failure(reason: str) -> SetParametersResult:
    return SetParametersResult(successful=False, reason=reason)


class NodeParameters:
    """Mixed into Node; `_init_parameters` must run before any other method."""

    def _init_parameters(self, overrides: dict[str, Parameter], allow_undeclared: bool) -> None:
        self._parameters: dict[str, Parameter] = {}
        self._descriptors: dict[str, ParameterDescriptor] = {}
        self._parameter_overrides = overrides
        self._allow_undeclared_parameters = allow_undeclared
        self._pre_set_parameters_callbacks: list[Callable[[list[Parameter]], list[Parameter]]] = []
        self._on_set_parameters_callbacks: list[OnSetCallback] = []
        self._post_set_parameters_callbacks: list[Callable[[list[Parameter]], None]] = []
        self._parameter_event_publisher: Any = None  # set by Node once it can publish

    def declare_parameter(
        self,
        name: str,
        value: Any = None,
        descriptor: ParameterDescriptor | None = None,
        ignore_override: bool = False,
    ) -> Parameter:
        """Declares `name` with a default (or a Parameter.Type); an override wins over it."""
        if value is None and descriptor is None:
            entry: tuple[Any, ...] = (name,)
        else:
            entry = (name, value, descriptor if descriptor is not None else ParameterDescriptor())
        return self.declare_parameters("", [entry], ignore_override)[0]

    def declare_parameters(
        self, namespace: str, parameters: list[tuple[Any, ...]], ignore_override: bool = False
    ) -> list[Parameter]:
        declared: list[tuple[Parameter, ParameterDescriptor]] = []
        for entry in parameters:
            declared.append(self._parameter_to_declare(namespace, entry, ignore_override))
        already = [p.name for p, _ in declared if p.name in self._parameters]
        if already:
            raise ParameterAlreadyDeclaredException(already)
        for parameter, descriptor in declared:
            result = self._set_common([parameter], {parameter.name: descriptor}, allow_not_set=True)
            if not result.successful:
                if result.reason.startswith("Wrong parameter type"):
                    raise InvalidParameterTypeException(
                        parameter, Parameter.Type(descriptor.type).name
                    )
                raise InvalidParameterValueException(parameter.name, parameter.value, result.reason)
        return [self._parameters[p.name] for p, _ in declared]

    def _parameter_to_declare(
        self, namespace: str, entry: tuple[Any, ...], ignore_override: bool
    ) -> tuple[Parameter, ParameterDescriptor]:
        if not 1 <= len(entry) <= 3 or not isinstance(entry[0], str):
            raise TypeError(
                f"invalid parameter tuple {entry!r}: expected (name[, value[, descriptor]])"
            )
        name = f"{namespace}.{entry[0]}" if namespace else entry[0]
        second = entry[1] if len(entry) > 1 else None
        descriptor = entry[2] if len(entry) > 2 else ParameterDescriptor()
        if not isinstance(descriptor, ParameterDescriptor):
            raise TypeError(f"third element of {entry!r} is not a ParameterDescriptor")
        if len(entry) == 1:
            warnings.warn(f"declaring parameter '{name}' by name only is deprecated", stacklevel=4)
            descriptor.dynamic_typing = True
        value = None
        if isinstance(second, Parameter.Type):
            if second is Parameter.Type.NOT_SET or descriptor.dynamic_typing:
                raise ValueError(
                    f"Cannot declare parameter {{{name}}} statically typed as {second}"
                )
            descriptor.type = second.value
        else:
            value = second
            if not descriptor.dynamic_typing:
                descriptor.type = Parameter.Type.from_parameter_value(value).value
                if descriptor.type == ParameterType.PARAMETER_NOT_SET:
                    raise ValueError(
                        "Cannot declare a statically typed parameter with default "
                        "value of type PARAMETER_NOT_SET"
                    )
        if not ignore_override and name in self._parameter_overrides:
            value = self._parameter_overrides[name].value
        return Parameter(name, value=value), descriptor

    def undeclare_parameter(self, name: str) -> None:
        if not self.has_parameter(name):
            raise ParameterNotDeclaredException(name)
        if self._descriptors[name].read_only:
            raise ParameterImmutableException(name)
        deleted = self._parameters.pop(name)
        del self._descriptors[name]
        self._publish_parameter_event(
            ParameterEvent(deleted_parameters=[deleted.to_parameter_msg()])
        )

    def has_parameter(self, name: str) -> bool:
        return name in self._parameters

    def get_parameter(self, name: str) -> Parameter:
        if name in self._parameters:
            parameter = self._parameters[name]
            if (
                parameter.type_ is not Parameter.Type.NOT_SET
                or self._descriptors[name].dynamic_typing
            ):
                return parameter
            raise ParameterUninitializedException(name)
        if self._allow_undeclared_parameters:
            return Parameter(name, Parameter.Type.NOT_SET, None)
        raise ParameterNotDeclaredException(name)

    def get_parameters(self, names: list[str]) -> list[Parameter]:
        return [self.get_parameter(name) for name in names]

    def get_parameter_or(self, name: str, alternative_value: Parameter | None = None) -> Parameter:
        if alternative_value is None:
            alternative_value = Parameter(name, Parameter.Type.NOT_SET)
        parameter = self._parameters.get(name)
        if parameter is None or parameter.type_ is Parameter.Type.NOT_SET:
            return alternative_value
        return parameter

    def get_parameters_by_prefix(self, prefix: str) -> dict[str, Parameter]:
        prefix = f"{prefix}." if prefix else ""
        return {n[len(prefix) :]: p for n, p in self._parameters.items() if n.startswith(prefix)}

    def describe_parameter(self, name: str) -> ParameterDescriptor:
        if name in self._descriptors:
            return self._descriptors[name]
        if self._allow_undeclared_parameters:
            return ParameterDescriptor()
        raise ParameterNotDeclaredException(name)

    def describe_parameters(self, names: list[str]) -> list[ParameterDescriptor]:
        return [self.describe_parameter(name) for name in names]

    def set_parameters(self, parameter_list: list[Parameter]) -> list[SetParametersResult]:
        """Sets each parameter on its own; a vetoed one does not stop the others."""
        return [self._set_atomically([parameter]) for parameter in parameter_list]

    def set_parameters_atomically(self, parameter_list: list[Parameter]) -> SetParametersResult:
        return self._set_atomically(parameter_list)

    def _set_atomically(self, parameter_list: list[Parameter]) -> SetParametersResult:
        if self._pre_set_parameters_callbacks:
            parameter_list = [
                p for cb in self._pre_set_parameters_callbacks for p in cb(parameter_list)
            ]
            if not parameter_list:
                return _failure(
                    "parameter list cannot be empty, this might be due to "
                    "pre_set_parameters_callback modifying the original parameters list."
                )
        if not all(isinstance(p, Parameter) for p in parameter_list):
            raise TypeError(f"parameter must be instance of type '{Parameter!r}'")
        undeclared = [p.name for p in parameter_list if p.name not in self._parameters]
        if undeclared and not self._allow_undeclared_parameters:
            raise ParameterNotDeclaredException(undeclared)
        return self._set_common(parameter_list)

    def _set_common(
        self,
        parameter_list: list[Parameter],
        descriptors: dict[str, ParameterDescriptor] | None = None,
        allow_not_set: bool = False,
    ) -> SetParametersResult:
        check_read_only = descriptors is None
        for parameter in parameter_list:
            descriptor = (descriptors or self._descriptors).get(parameter.name)
            if descriptor is not None:
                result = self._apply_descriptor(parameter, descriptor, check_read_only)
                if not result.successful:
                    return result
        for callback in self._on_set_parameters_callbacks:
            result = callback(parameter_list)
            if not result.successful:
                return result
        self._store(parameter_list, descriptors, allow_not_set)
        for post_callback in self._post_set_parameters_callbacks:
            post_callback(parameter_list)
        return SetParametersResult(successful=True)

    def _store(
        self,
        parameter_list: list[Parameter],
        descriptors: dict[str, ParameterDescriptor] | None,
        allow_not_set: bool,
    ) -> None:
        event = ParameterEvent()
        for parameter in parameter_list:
            name = parameter.name
            if not allow_not_set and parameter.type_ is Parameter.Type.NOT_SET:
                self._parameters.pop(name, None)  # setting NOT_SET undeclares, as in rclpy
                self._descriptors.pop(name, None)
                event.deleted_parameters.append(parameter.to_parameter_msg())
                continue
            if descriptors is not None:
                self._descriptors[name] = descriptors[name]
            elif name not in self._descriptors:
                self._descriptors[name] = ParameterDescriptor(dynamic_typing=True)
            old = self._parameters.get(name)
            is_new = old is None or old.type_ is Parameter.Type.NOT_SET
            (event.new_parameters if is_new else event.changed_parameters).append(
                parameter.to_parameter_msg()
            )
            self._parameters[name] = parameter
        self._publish_parameter_event(event)

    def _publish_parameter_event(self, event: ParameterEvent) -> None:
        if self._parameter_event_publisher is None:
            return
        event.stamp = self.get_clock().now().to_msg()  # type: ignore[attr-defined]
        event.node = self.get_fully_qualified_name()  # type: ignore[attr-defined]
        self._parameter_event_publisher.publish(event)

    def get_parameter_type(self, name: str) -> int:
        """The ParameterType constant of a declared parameter."""
        if not self.has_parameter(name):
            raise ParameterNotDeclaredException(name)
        return self._parameters[name].type_.value

    def get_parameter_types(self, names: list[str]) -> list[int]:
        return [self.get_parameter_type(n) for n in names]

    def list_parameters(self, prefixes: list[str], depth: int) -> ListParametersResult:
        """The names under `prefixes` (all when empty) at most `depth` levels ('.'-separated)
        below them (0: any depth), and the prefixes of the names found, as rclpy lists them."""
        if depth < 0:
            raise ValueError("depth must not be negative")
        result = ListParametersResult()

        def shallow(name: str) -> bool:
            return depth == 0 or name.count(".") < depth

        for name in self._parameters:
            under = [p for p in prefixes if name == p or name.startswith(p + ".")]
            listed = (not prefixes and shallow(name)) or any(
                name == p or shallow(name[len(p) + 1 :]) for p in under
            )
            if not listed:
                continue
            result.names.append(name)
            prefix = name.rpartition(".")[0]
            if prefix and prefix not in result.prefixes:
                result.prefixes.append(prefix)
        return result

    def _apply_descriptor(
        self, parameter: Parameter, descriptor: ParameterDescriptor, check_read_only: bool
    ) -> SetParametersResult:
        descriptor.name = parameter.name
        if check_read_only and descriptor.read_only:
            return _failure(f"Trying to set a read-only parameter: {parameter.name}.")
        if descriptor.dynamic_typing:
            descriptor.type = parameter.type_.value
        elif self.has_parameter(parameter.name) and parameter.type_ is Parameter.Type.NOT_SET:
            return _failure("Static parameter cannot be undeclared")
        elif (
            parameter.type_ is not Parameter.Type.NOT_SET
            and parameter.type_.value != descriptor.type
        ):
            return _failure(
                f"Wrong parameter type, expected '{Parameter.Type(descriptor.type)}'"
                f" got '{parameter.type_}'"
            )
        if parameter.type_ is Parameter.Type.INTEGER and descriptor.integer_range:
            bounds = descriptor.integer_range[0]
            return _check_range(
                parameter, bounds.from_value, bounds.to_value, bounds.step, exact=True
            )
        if parameter.type_ is Parameter.Type.DOUBLE and descriptor.floating_point_range:
            bounds = descriptor.floating_point_range[0]
            return _check_range(
                parameter, bounds.from_value, bounds.to_value, bounds.step, exact=False
            )
        return SetParametersResult(successful=True)

    def add_pre_set_parameters_callback(
        self, callback: Callable[[list[Parameter]], list[Parameter]]
    ) -> None:
        self._pre_set_parameters_callbacks.insert(0, callback)

    def remove_pre_set_parameters_callback(self, callback: Callable[..., Any]) -> None:
        self._pre_set_parameters_callbacks.remove(callback)

    def add_on_set_parameters_callback(self, callback: OnSetCallback) -> None:
        """`callback(params) -> SetParametersResult` may veto a change; newest runs first."""
        self._on_set_parameters_callbacks.insert(0, callback)

    def remove_on_set_parameters_callback(self, callback: OnSetCallback) -> None:
        self._on_set_parameters_callbacks.remove(callback)

    def add_post_set_parameters_callback(self, callback: Callable[[list[Parameter]], None]) -> None:
        self._post_set_parameters_callbacks.insert(0, callback)

    def remove_post_set_parameters_callback(self, callback: Callable[..., Any]) -> None:
        self._post_set_parameters_callbacks.remove(callback)


def _check_range(
    parameter: Parameter, low: float, high: float, step: float, exact: bool
) -> SetParametersResult:
    low, high = min(low, high), max(low, high)
    value = parameter.value

    def close(a: float, b: float) -> bool:
        return a == b if exact else math.isclose(a, b, rel_tol=PARAM_REL_TOL)

    if close(value, low) or close(value, high):
        return SetParametersResult(successful=True)
    if not low < value < high:
        return _failure(
            f"Parameter {parameter.name} out of range. Min: {low}, Max: {high}, value: {value}"
        )
    if step and not close(low + round((value - low) / step) * step, value):
        return _failure(
            f"The parameter value for {parameter.name} is not a valid step. "
            f"Min: {low}, max: {high}, value: {value}, step: {step}"
        )
    return SetParametersResult(successful=True)
