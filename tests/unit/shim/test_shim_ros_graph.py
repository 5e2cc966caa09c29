"""What rcl gives every node, on the shim (in-process transport): parameter services answered
through the node's parameters, /parameter_events, /rosout, and the graph (names, counts, the
endpoints of each node). Expected behaviour is rclpy's (Jazzy): parameter_service.py, node.py,
rcl's logging_rosout.c."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ros_bridge.shim import rclpy
from ros_bridge.shim.graph import ros_name, ros_type
from ros_bridge.shim.rcl_interfaces import srv
from ros_bridge.shim.rcl_interfaces.msg import (
    FloatingPointRange,
    Log,
    ParameterDescriptor,
    ParameterEvent,
    ParameterType,
    SetParametersResult,
)
from ros_bridge.shim.rclpy.executors import MultiThreadedExecutor
from ros_bridge.shim.rclpy.logging import LoggingSeverity
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.rclpy.parameter import Parameter
from ros_bridge.shim.rclpy.qos import qos_profile_rosout_default
from ros_bridge.shim.sensor_msgs.msg import Image
from tests.support.waiting import Spinning, wait_until


class Pair:
    """A node with parameters and a probe node, spun by one executor thread."""

    def __init__(self) -> None:
        self.node = Node("talker", namespace="/robot")
        self.node.declare_parameter(
            "deadline_ms",
            500.0,
            ParameterDescriptor(
                floating_point_range=[FloatingPointRange(from_value=1.0, to_value=1e3)]
            ),
        )
        self.node.declare_parameter("mode", "a", ParameterDescriptor(read_only=True))
        self.node.declare_parameter("gains.p", 1)
        self.node.declare_parameter("gains.i", 0)
        self.node.add_on_set_parameters_callback(self._veto)
        self.probe = Node("probe")
        self.events: list[ParameterEvent] = []
        self.probe.create_subscription(ParameterEvent, "/parameter_events", self.events.append, 100)
        self.spinning = Spinning(MultiThreadedExecutor(num_threads=2), self.node, self.probe)

    @staticmethod
    def _veto(params: list[Parameter]) -> SetParametersResult:
        bad = [p.name for p in params if p.name == "gains.p" and p.value < 0]
        return SetParametersResult(successful=not bad, reason="gains must be >= 0" if bad else "")

    def call(self, srv_type: Any, service: str, **fields: Any) -> Any:
        client = self.probe.create_client(srv_type, f"/robot/talker/{service}")
        assert client.wait_for_service(timeout_sec=10)
        response = client.call(srv_type.Request(**fields), timeout_sec=10)
        self.probe.destroy_client(client)
        return response

    def close(self) -> None:
        self.spinning.stop()


@pytest.fixture
def pair() -> Iterator[Pair]:
    rclpy.init(transport="inproc")
    made = Pair()
    try:
        yield made
    finally:
        made.close()
        rclpy.try_shutdown()


def _msg(name: str, value: Any) -> Any:
    return Parameter(name, value=value).to_parameter_msg()


def test_set_parameters_goes_through_descriptors_and_callbacks(pair: Pair) -> None:
    response = pair.call(
        srv.SetParameters,
        "set_parameters",
        parameters=[
            _msg("deadline_ms", 80.0),
            _msg("mode", "b"),
            _msg("deadline_ms", 5000.0),
            _msg("deadline_ms", 80),  # an int for a double
            _msg("gains.p", -1),
            _msg("nope", 1),
        ],
    )
    ok, read_only, out_of_range, wrong_type, vetoed, undeclared = response.results
    assert ok == SetParametersResult(successful=True, reason="")
    assert not read_only.successful and "read-only" in read_only.reason
    assert not out_of_range.successful and "out of range" in out_of_range.reason
    assert not wrong_type.successful and "Wrong parameter type" in wrong_type.reason
    assert vetoed == SetParametersResult(successful=False, reason="gains must be >= 0")
    assert not undeclared.successful and "undeclared" in undeclared.reason
    assert pair.node.get_parameter("deadline_ms").value == 80.0
    atomic = pair.call(
        srv.SetParametersAtomically,
        "set_parameters_atomically",
        parameters=[_msg("gains.i", 5), _msg("gains.p", -2)],
    )
    assert not atomic.result.successful and pair.node.get_parameter("gains.i").value == 0


def test_get_list_describe_and_types(pair: Pair) -> None:
    values = pair.call(srv.GetParameters, "get_parameters", names=["deadline_ms", "mode"]).values
    assert [(v.type, v.double_value, v.string_value) for v in values] == [
        (ParameterType.PARAMETER_DOUBLE, 500.0, ""),
        (ParameterType.PARAMETER_STRING, 0.0, "a"),
    ]
    assert pair.call(srv.GetParameters, "get_parameters", names=["mode", "nope"]).values == []
    types = pair.call(srv.GetParameterTypes, "get_parameter_types", names=["gains.p", "mode"])
    assert list(types.types) == [ParameterType.PARAMETER_INTEGER, ParameterType.PARAMETER_STRING]
    everything = pair.call(srv.ListParameters, "list_parameters").result
    assert sorted(everything.names) == ["deadline_ms", "gains.i", "gains.p", "mode", "use_sim_time"]
    assert everything.prefixes == ["gains"]
    top = pair.call(srv.ListParameters, "list_parameters", depth=1).result
    assert sorted(top.names) == ["deadline_ms", "mode", "use_sim_time"]
    gains = pair.call(srv.ListParameters, "list_parameters", prefixes=["gains"], depth=1).result
    assert sorted(gains.names) == ["gains.i", "gains.p"]
    (descriptor,) = pair.call(
        srv.DescribeParameters, "describe_parameters", names=["mode"]
    ).descriptors
    assert descriptor.read_only and descriptor.name == "mode"


def test_every_change_is_a_parameter_event(pair: Pair) -> None:
    assert pair.node.set_parameters([Parameter("deadline_ms", value=90.0)])[0].successful
    pair.node.declare_parameter("late", True)
    pair.node.undeclare_parameter("late")

    def kinds() -> list[tuple[str, list[str]]] | None:
        seen = [
            (kind, [p.name for p in getattr(e, f"{kind}_parameters")])
            for e in pair.events
            for kind in ("new", "changed", "deleted")
            if getattr(e, f"{kind}_parameters")
        ]
        return seen if len(seen) == 3 else None

    assert wait_until(kinds, "three parameter events") == [
        ("changed", ["deadline_ms"]),
        ("new", ["late"]),
        ("deleted", ["late"]),
    ]
    assert {e.node for e in pair.events} == {"/robot/talker"}
    assert pair.events[0].changed_parameters[0].value.double_value == 90.0


def test_log_lines_at_or_above_the_level_go_to_rosout() -> None:
    rclpy.init(transport="inproc")
    node = Node("talker")
    try:
        node.get_logger().set_level(LoggingSeverity.INFO)  # other tests may have set it
        node.get_logger().info("before anyone listened")
        node.get_logger().debug("below the level")
        probe = Node("probe")
        lines: list[Log] = []
        probe.create_subscription(Log, "/rosout", lines.append, qos_profile_rosout_default)
        node.get_logger().get_child("worker").warning("from a sub-logger")
        node.get_logger().set_level(LoggingSeverity.DEBUG)
        node.get_logger().debug("now at the level")
        wait_until(lambda: rclpy.spin_once(probe, timeout_sec=0.01) or len(lines) >= 3, "3 lines")
        assert [(x.level, x.name, x.msg) for x in lines] == [
            (20, "talker", "before anyone listened"),  # transient local: logged before joining
            (30, "talker.worker", "from a sub-logger"),
            (10, "talker", "now at the level"),
        ]
        assert lines[0].file == __file__ and lines[0].function.startswith("test_log_lines")
        node.destroy_node()
        node.get_logger().info("after the node is gone")
        rclpy.spin_once(probe, timeout_sec=0)
        assert len(lines) == 3
    finally:
        node.get_logger().set_level(LoggingSeverity.INFO)  # loggers outlive the test
        rclpy.try_shutdown()


def test_the_graph_names_nodes_and_their_endpoints() -> None:
    rclpy.init(transport="inproc")
    try:
        node = Node("camera", namespace="/robot")
        listener = Node("listener")
        publisher = node.create_publisher(Image, "image_raw", 5)
        listener.create_subscription(Image, "/robot/image_raw", lambda m: None, 5)
        assert set(listener.get_node_names_and_namespaces()) == {
            ("camera", "/robot"),
            ("listener", "/"),
        }
        assert listener.get_fully_qualified_node_names() == ["/robot/camera", "/listener"]
        assert (
            listener.count_publishers("/robot/image_raw"),
            node.count_subscribers("image_raw"),
        ) == (1, 1)
        assert (
            "/robot/image_raw",
            ["sensor_msgs/msg/Image"],
        ) in listener.get_topic_names_and_types()
        assert listener.get_publisher_names_and_types_by_node("camera", "/robot") == [
            ("/parameter_events", ["rcl_interfaces/msg/ParameterEvent"]),
            ("/robot/image_raw", ["sensor_msgs/msg/Image"]),
            ("/rosout", ["rcl_interfaces/msg/Log"]),
        ]
        services = dict(listener.get_service_names_and_types_by_node("camera", "/robot"))
        assert services["/robot/camera/set_parameters"] == ["rcl_interfaces/srv/SetParameters"]
        assert len(services) == 6
        node.destroy_publisher(publisher)
        assert listener.count_publishers("/robot/image_raw") == 0
        node.destroy_node()
        assert listener.get_node_names() == ["listener"]
    finally:
        rclpy.try_shutdown()


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("rt/robot/image_raw", ("topic", "/robot/image_raw")),
        ("rq/vla_bridge/get_parametersRequest", ("request", "/vla_bridge/get_parameters")),
        ("rr/vla_bridge/get_parametersReply", ("reply", "/vla_bridge/get_parameters")),
        ("ros_discovery_info", None),
        ("DCPSParticipant", None),
    ],
)
def test_dds_topic_names_demangle_as_rmw_demangles_them(topic: str, expected: Any) -> None:
    assert ros_name(topic) == expected


def test_dds_type_names_demangle_as_rmw_demangles_them() -> None:
    assert ros_type("sensor_msgs::msg::dds_::Image_") == "sensor_msgs/msg/Image"
    assert ros_type("rcl_interfaces::srv::dds_::GetParameters_Request_") == (
        "rcl_interfaces/srv/GetParameters"
    )
    assert ros_type("HelloWorld") == "HelloWorld"
