"""The six parameter services rclpy starts for every node, answered from the node's own API.

`~/get_parameters`, `~/get_parameter_types`, `~/set_parameters`, `~/set_parameters_atomically`,
`~/list_parameters` and `~/describe_parameters` (rcl_interfaces/srv), with the parameters QoS.
Sets go through `set_parameters_atomically` one parameter at a time (`set_parameters`) or all at
once, so descriptors (read-only, type, ranges) and the node's on-set callbacks decide, and a
refusal comes back as a failed SetParametersResult with its reason. As in rclpy, a request naming
an undeclared parameter gets an empty answer.
"""

from __future__ import annotations

from typing import Any

from ros_bridge.shim.rcl_interfaces.msg import ListParametersResult, SetParametersResult
from ros_bridge.shim.rcl_interfaces.srv import (
    DescribeParameters,
    GetParameters,
    GetParameterTypes,
    ListParameters,
    SetParameters,
    SetParametersAtomically,
)
from ros_bridge.shim.rclpy.exceptions import (
    ParameterNotDeclaredException,
    ParameterUninitializedException,
)
from ros_bridge.shim.rclpy.parameter import Parameter
from ros_bridge.shim.rclpy.qos import qos_profile_parameters


class ParameterService:
    def __init__(self, node: Any) -> None:
        self._node = node
        services = (
            (DescribeParameters, "describe_parameters", self._describe),
            (GetParameters, "get_parameters", self._get),
            (GetParameterTypes, "get_parameter_types", self._get_types),
            (ListParameters, "list_parameters", self._list),
            (SetParameters, "set_parameters", self._set),
            (SetParametersAtomically, "set_parameters_atomically", self._set_atomically),
        )
        for srv_type, name, callback in services:
            node.create_service(
                srv_type, f"{node.get_name()}/{name}", callback, qos_profile=qos_profile_parameters
            )

    def _describe(self, request: Any, response: Any) -> Any:
        try:
            response.descriptors = self._node.describe_parameters(list(request.names))
        except ParameterNotDeclaredException:
            response.descriptors = []
        return response

    def _get(self, request: Any, response: Any) -> Any:
        try:
            params = self._node.get_parameters(list(request.names))
        except (ParameterNotDeclaredException, ParameterUninitializedException):
            params = []
        response.values = [p.get_parameter_value() for p in params]
        return response

    def _get_types(self, request: Any, response: Any) -> Any:
        try:
            response.types = self._node.get_parameter_types(list(request.names))
        except ParameterNotDeclaredException:
            response.types = []
        return response

    def _list(self, request: Any, response: Any) -> Any:
        try:
            response.result = self._node.list_parameters(list(request.prefixes), request.depth)
        except (TypeError, ValueError):
            response.result = ListParametersResult()
        return response

    def _set(self, request: Any, response: Any) -> Any:
        response.results = [self._set_all([p]) for p in request.parameters]
        return response

    def _set_atomically(self, request: Any, response: Any) -> Any:
        response.result = self._set_all(list(request.parameters))
        return response

    def _set_all(self, messages: list[Any]) -> SetParametersResult:
        try:
            params = [Parameter.from_parameter_msg(m) for m in messages]
            return self._node.set_parameters_atomically(params)
        except (ParameterNotDeclaredException, TypeError, ValueError) as exc:
            # undeclared, or a value that does not match the type it claims
            return SetParametersResult(successful=False, reason=str(exc))
