"""rclpy semantics of the shim: init/shutdown, Node parameters, names, time, logging, QoS.

Expected behaviour is rclpy's (Jazzy), as documented in rclpy's node.py/parameter.py/qos.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from ros_bridge.shim import rclpy
from ros_bridge.shim.builtin_interfaces.msg import Time as TimeMsg
from ros_bridge.shim.rcl_interfaces.msg import (
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from ros_bridge.shim.rclpy.clock import ClockType
from ros_bridge.shim.rclpy.duration import Duration
from ros_bridge.shim.rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    InvalidTopicNameException,
    NotInitializedException,
    ParameterAlreadyDeclaredException,
    ParameterNotDeclaredException,
    ParameterUninitializedException,
)
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.rclpy.parameter import Parameter
from ros_bridge.shim.rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    InvalidQoSProfileException,
    QoSProfile,
    ReliabilityPolicy,
    profile_from,
    qos_profile_sensor_data,
    qos_profile_system_default,
)
from ros_bridge.shim.rclpy.time import Time
from ros_bridge.shim.sensor_msgs.msg import Image


@pytest.fixture
def ros() -> Iterator[None]:
    rclpy.init(transport="inproc")
    try:
        yield
    finally:
        rclpy.try_shutdown()


def test_init_ok_shutdown_lifecycle() -> None:
    assert not rclpy.ok()
    with pytest.raises(NotInitializedException):
        Node("too_early")
    rclpy.init(transport="inproc")
    assert rclpy.ok()
    with pytest.raises(RuntimeError):
        rclpy.init()
    rclpy.shutdown()
    assert not rclpy.ok()
    with pytest.raises(RuntimeError):
        rclpy.shutdown()
    rclpy.try_shutdown()  # idempotent
    with rclpy.init(transport="inproc"):  # re-init after shutdown, as a context manager
        assert rclpy.ok()
    assert not rclpy.ok()


def test_declare_and_get_with_descriptor(ros: None) -> None:
    node = Node("vla_bridge")
    desc = ParameterDescriptor(description="Deadline per action, in ms")
    param = node.declare_parameter("deadline_ms", 150.0, desc)
    assert param.value == 150.0 and param.type_ is Parameter.Type.DOUBLE
    assert node.get_parameter("deadline_ms").value == 150.0
    assert node.describe_parameter("deadline_ms").description == "Deadline per action, in ms"
    assert node.describe_parameter("deadline_ms").type == Parameter.Type.DOUBLE.value
    assert node.get_parameter("use_sim_time").value is False  # every node declares it
    with pytest.raises(ParameterAlreadyDeclaredException):
        node.declare_parameter("deadline_ms", 1.0)
    with pytest.raises(ParameterNotDeclaredException):
        node.get_parameter("nope")
    params = node.declare_parameters("", [("server_url", "http://x"), ("topics", ["a", "b"])])
    assert [p.value for p in params] == ["http://x", ["a", "b"]]
    assert node.get_parameter("topics").type_ is Parameter.Type.STRING_ARRAY


def test_overrides_win_over_defaults(ros: None) -> None:
    node = Node(
        "vla_bridge",
        cli_args=["--ros-args", "-p", "priority:=3", "-p", "topics:=[cam_a, cam_b]"],
        parameter_overrides=[Parameter("instruction", value="pick up the cube")],
    )
    assert node.declare_parameter("priority", 0).value == 3
    assert node.declare_parameter("topics", ["x"]).value == ["cam_a", "cam_b"]
    assert node.declare_parameter("instruction", "").value == "pick up the cube"
    assert node.declare_parameter("instruction2", "d", ignore_override=True).value == "d"
    with pytest.raises(InvalidParameterTypeException):  # override type differs from default
        Node("other", cli_args=["--ros-args", "-p", "rate:=fast"]).declare_parameter("rate", 1.0)


def test_typed_declaration_without_value_is_uninitialized(ros: None) -> None:
    node = Node("n")
    node.declare_parameter("joint_names", Parameter.Type.STRING_ARRAY)
    with pytest.raises(ParameterUninitializedException):
        node.get_parameter("joint_names")
    assert node.get_parameter_or("joint_names", Parameter("x", value=1)).value == 1
    node.set_parameters([Parameter("joint_names", value=["j1"])])
    assert node.get_parameter("joint_names").value == ["j1"]


def test_empty_list_default_is_byte_array_as_in_rclpy(ros: None) -> None:
    node = Node("n")
    assert node.declare_parameter("names", []).type_ is Parameter.Type.BYTE_ARRAY
    (result,) = node.set_parameters([Parameter("names", value=["a"])])
    assert not result.successful and result.reason.startswith("Wrong parameter type")


def test_set_parameters_runs_callbacks_and_respects_types(ros: None) -> None:
    node = Node("n")
    seen: list[list[str]] = []

    def validate(params: list[Parameter]) -> SetParametersResult:
        seen.append([p.name for p in params])
        bad = [p.name for p in params if p.name == "budget_ms" and p.value <= 0]
        return SetParametersResult(successful=not bad, reason="budget must be > 0" if bad else "")

    node.add_on_set_parameters_callback(validate)
    node.declare_parameter("budget_ms", 40.0)
    node.declare_parameter("model", "x", ParameterDescriptor(read_only=True))
    assert seen == [["budget_ms"], ["model"]]  # declaration runs the callbacks too
    ok, vetoed, wrong_type, read_only = node.set_parameters(
        [
            Parameter("budget_ms", value=55.0),
            Parameter("budget_ms", value=-1.0),
            Parameter("budget_ms", value=3),
            Parameter("model", value="y"),
        ]
    )
    assert ok.successful and node.get_parameter("budget_ms").value == 55.0
    assert (vetoed.successful, vetoed.reason) == (False, "budget must be > 0")
    assert not wrong_type.successful and "Wrong parameter type" in wrong_type.reason
    assert not read_only.successful and "read-only" in read_only.reason
    node.add_on_set_parameters_callback(lambda ps: SetParametersResult(successful=False))
    with pytest.raises(InvalidParameterValueException):  # a vetoed declaration raises
        node.declare_parameter("rejected", 1)
    with pytest.raises(ParameterNotDeclaredException):
        node.set_parameters([Parameter("undeclared", value=1)])


def test_integer_range(ros: None) -> None:
    node = Node("n")
    desc = ParameterDescriptor(integer_range=[IntegerRange(from_value=0, to_value=10, step=2)])
    node.declare_parameter("priority", 4, desc)
    results = node.set_parameters([Parameter("priority", value=v) for v in (10, 11, 3, 6)])
    assert [r.successful for r in results] == [True, False, False, True]


def test_topic_names_namespaces_and_remaps(ros: None) -> None:
    node = Node(
        "vla_bridge",
        namespace="robot1",
        cli_args=["--ros-args", "-r", "image:=/camera/image_raw", "-r", "vla_bridge:~/x:=out"],
    )
    assert node.get_fully_qualified_name() == "/robot1/vla_bridge"
    assert node.resolve_topic_name("image") == "/camera/image_raw"
    assert node.resolve_topic_name("joint_states") == "/robot1/joint_states"
    assert node.resolve_topic_name("/diagnostics") == "/diagnostics"
    assert node.resolve_topic_name("~/commands") == "/robot1/vla_bridge/commands"
    assert node.resolve_topic_name("~/x") == "/robot1/out"
    assert node.create_publisher(Image, "image", 1).topic_name == "/camera/image_raw"
    with pytest.raises(InvalidTopicNameException):
        node.resolve_topic_name("bad name")
    renamed = Node("x", cli_args=["--ros-args", "-r", "__node:=cam", "-r", "__ns:=/arm"])
    assert renamed.get_fully_qualified_name() == "/arm/cam"


def test_time_and_duration_semantics(ros: None) -> None:
    now = Node("n").get_clock().now()
    assert now.clock_type is ClockType.ROS_TIME
    sec, nanosec = now.seconds_nanoseconds()
    assert now.to_msg() == TimeMsg(sec=sec, nanosec=nanosec)
    stamp = Time.from_msg(TimeMsg(sec=10, nanosec=5))
    assert stamp.nanoseconds == 10_000_000_005
    later = stamp + Duration(seconds=0.5)
    assert (later - stamp) == Duration(nanoseconds=500_000_000) and later > stamp
    assert (stamp - later).nanoseconds == -500_000_000
    assert Duration(nanoseconds=-1).to_msg().sec == -1  # nanosec stays non-negative
    assert Duration(nanoseconds=-1).to_msg().nanosec == 999_999_999
    with pytest.raises(TypeError):
        _ = stamp - Time(nanoseconds=1, clock_type=ClockType.SYSTEM_TIME)
    with pytest.raises(TypeError):
        _ = stamp == 10
    with pytest.raises(ValueError):
        Time(nanoseconds=-1)


def test_logger_levels_and_filters(ros: None, caplog: pytest.LogCaptureFixture) -> None:
    logger = Node("talker").get_logger()
    with caplog.at_level(logging.DEBUG, logger="ros"):
        logger.set_level(rclpy.logging.LoggingSeverity.DEBUG)
        for method in (logger.debug, logger.info, logger.warn, logger.warning, logger.error):
            assert method("m") is True
        logged = [logger.info("once", once=True) for _ in range(3)]
        skipped = [logger.info("skip", skip_first=True) for _ in range(2)]
        throttled = [logger.info("t", throttle_duration_sec=3600.0) for _ in range(3)]
    assert logged == [True, False, False] and skipped == [False, True]
    assert throttled == [True, False, False]
    assert [r.levelname for r in caplog.records[:5]] == [
        "DEBUG",
        "INFO",
        "WARNING",
        "WARNING",
        "ERROR",
    ]
    assert all(r.name == "ros.talker" for r in caplog.records)


def test_qos_profiles_like_rmw() -> None:
    with pytest.raises(InvalidQoSProfileException):
        QoSProfile(reliability=ReliabilityPolicy.RELIABLE)
    with pytest.raises(InvalidQoSProfileException):
        QoSProfile(history=HistoryPolicy.KEEP_LAST)
    assert QoSProfile(history=HistoryPolicy.KEEP_ALL).history is HistoryPolicy.KEEP_ALL
    by_depth = profile_from(7)
    assert (by_depth.history, by_depth.depth) == (HistoryPolicy.KEEP_LAST, 7)
    assert (by_depth.reliability, by_depth.durability) == (
        ReliabilityPolicy.RELIABLE,
        DurabilityPolicy.VOLATILE,
    )
    sensor = qos_profile_sensor_data
    assert (sensor.depth, sensor.reliability) == (5, ReliabilityPolicy.BEST_EFFORT)
    assert qos_profile_system_default.reliability is ReliabilityPolicy.SYSTEM_DEFAULT
    assert QoSProfile(depth=5, reliability=2) == QoSProfile(
        depth=5, reliability=ReliabilityPolicy.BEST_EFFORT
    )
    with pytest.raises(TypeError):
        profile_from("reliable")


def test_params_file_and_ros_args_stripping(tmp_path, ros: None) -> None:
    params = tmp_path / "bridge.yaml"
    params.write_text(
        "/**:\n"
        "  ros__parameters:\n"
        "    control_rate_hz: 10.0\n"
        "    output: float64_multiarray\n"
        "vla_bridge:\n"
        "  ros__parameters:\n"
        "    control_rate_hz: 30.0\n"
        "    budgets:\n"
        "      itl_p99_ms: 40.0\n"
        "    image_topics: [/cam/left, /cam/right]\n",
        encoding="utf-8",
    )
    argv = ["vla-bridge", "--x", "--ros-args", "--params-file", str(params), "--", "--y"]
    assert rclpy.utilities.remove_ros_args(argv) == ["vla-bridge", "--x", "--y"]
    node = Node("vla_bridge", cli_args=argv)
    assert node.declare_parameter("control_rate_hz", 1.0).value == 30.0
    assert node.declare_parameter("output", "").value == "float64_multiarray"
    assert node.declare_parameter("budgets.itl_p99_ms", 1.0).value == 40.0
    assert node.declare_parameter("image_topics", ["x"]).value == ["/cam/left", "/cam/right"]
    other = Node("other", cli_args=argv)
    assert other.declare_parameter("control_rate_hz", 1.0).value == 10.0
