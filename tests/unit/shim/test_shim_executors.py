"""Executors, timers, subscriptions and QoS on the shim's in-process transport (rclpy semantics)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ros_bridge.shim import rclpy
from ros_bridge.shim.cdr import serialize_message
from ros_bridge.shim.rclpy.callback_groups import (
    MutuallyExclusiveCallbackGroup,
    ReentrantCallbackGroup,
)
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.executors import (
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.rclpy.qos import (
    DurabilityPolicy,
    QoSProfile,
    qos_profile_sensor_data,
)
from ros_bridge.shim.sensor_msgs.msg import Image, JointState
from ros_bridge.shim.std_msgs.msg import Float64MultiArray

RELIABLE_10 = QoSProfile(depth=10)


@pytest.fixture
def node() -> Iterator[Node]:
    rclpy.init(transport="inproc")
    node = Node("exec_test")
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _spin_all(executor: SingleThreadedExecutor) -> None:
    """Runs callbacks until none is ready right now."""
    for _ in range(1000):
        before = time.monotonic()
        executor.spin_once(timeout_sec=0)
        if time.monotonic() - before > 0.5:
            break


def _float_msg(value: float) -> Float64MultiArray:
    return Float64MultiArray(data=[value])


def test_keep_last_depth_bounds_the_queue(node: Node) -> None:
    received: list[float] = []
    qos = QoSProfile(depth=3)
    node.create_subscription(Float64MultiArray, "cmd", lambda m: received.append(m.data[0]), qos)
    publisher = node.create_publisher(Float64MultiArray, "cmd", 10)
    assert publisher.get_subscription_count() == 1
    for i in range(10):
        publisher.publish(_float_msg(float(i)))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    _spin_all(executor)
    assert received == [7.0, 8.0, 9.0]  # only the newest `depth` samples, in order


def test_qos_compatibility_rules(node: Node) -> None:
    got: dict[str, int] = {"reliable_sub": 0, "best_effort_sub": 0}
    node.create_subscription(
        Float64MultiArray,
        "t",
        lambda m: got.__setitem__("reliable_sub", got["reliable_sub"] + 1),
        RELIABLE_10,
    )
    node.create_subscription(
        Float64MultiArray,
        "t",
        lambda m: got.__setitem__("best_effort_sub", got["best_effort_sub"] + 1),
        qos_profile_sensor_data,
    )
    best_effort_pub = node.create_publisher(Float64MultiArray, "t", qos_profile_sensor_data)
    reliable_pub = node.create_publisher(Float64MultiArray, "t", RELIABLE_10)
    assert best_effort_pub.get_subscription_count() == 1  # a reliable reader does not match
    assert reliable_pub.get_subscription_count() == 2
    best_effort_pub.publish(_float_msg(1.0))
    reliable_pub.publish(_float_msg(2.0))
    rclpy.spin_once(node, timeout_sec=0)
    rclpy.spin_once(node, timeout_sec=0)
    rclpy.spin_once(node, timeout_sec=0)
    assert got == {"reliable_sub": 1, "best_effort_sub": 2}


def test_transient_local_late_joiner_and_type_matching(node: Node) -> None:
    latched = QoSProfile(depth=2, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    publisher = node.create_publisher(Float64MultiArray, "latched", latched)
    for i in range(3):
        publisher.publish(_float_msg(float(i)))
    late: list[float] = []
    node.create_subscription(
        Float64MultiArray, "latched", lambda m: late.append(m.data[0]), latched
    )
    wrong_type: list[object] = []
    node.create_subscription(JointState, "latched", wrong_type.append, latched)
    _spin_all_node(node)
    assert late == [1.0, 2.0] and wrong_type == []


def _spin_all_node(node: Node) -> None:
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    _spin_all(executor)
    executor.remove_node(node)


def test_subscribers_get_their_own_copy(node: Node) -> None:
    got: list[Image] = []
    node.create_subscription(Image, "image", got.append, qos_profile_sensor_data)
    node.create_subscription(Image, "image", got.append, qos_profile_sensor_data)
    publisher = node.create_publisher(Image, "image", qos_profile_sensor_data)
    msg = Image(height=1, width=2, encoding="mono8", step=2, data=b"ab")
    publisher.publish(msg)
    msg.data = b"zz"  # changing the message after publish changes nothing delivered
    _spin_all_node(node)
    assert [m.data.tobytes() for m in got] == [b"ab", b"ab"] and got[0] is not got[1]


def test_raw_subscription_and_raw_publish(node: Node) -> None:
    raw: list[bytes] = []
    node.create_subscription(JointState, "js", raw.append, 10, raw=True)
    publisher = node.create_publisher(JointState, "js", 10)
    msg = JointState(name=["a"], position=[1.5])
    publisher.publish(msg)
    publisher.publish(serialize_message(msg))
    _spin_all_node(node)
    assert raw == [serialize_message(msg)] * 2
    with pytest.raises(TypeError):
        publisher.publish(Image())


def test_timer_period_cancel_reset(node: Node) -> None:
    calls: list[int] = []
    created = time.monotonic_ns()
    timer = node.create_timer(0.02, lambda: calls.append(time.monotonic_ns()))
    assert timer.timer_period_ns == 20_000_000
    while len(calls) < 3:
        rclpy.spin_once(node, timeout_sec=1.0)
    # The k-th call never comes before k periods have passed.
    assert all(t >= created + (k + 1) * 20_000_000 for k, t in enumerate(calls))
    timer.cancel()
    assert timer.is_canceled() and timer.time_until_next_call() is None
    rclpy.spin_once(node, timeout_sec=0.05)
    assert len(calls) == 3
    timer.reset()
    rclpy.spin_once(node, timeout_sec=1.0)
    assert len(calls) == 4 and not timer.is_canceled()


def test_late_timer_skips_missed_periods(node: Node) -> None:
    calls: list[int] = []
    node.create_timer(0.2, lambda: calls.append(1))
    time.sleep(0.7)  # three periods pass without spinning; the next is 0.1 s away
    for _ in range(5):
        rclpy.spin_once(node, timeout_sec=0)
    assert len(calls) == 1  # one call now, not a burst of three


def test_autostart_false(node: Node) -> None:
    timer = node.create_timer(0.01, lambda: None, autostart=False)
    assert timer.is_canceled()


def test_callback_exception_propagates_from_spin_once(node: Node) -> None:
    def boom() -> None:
        raise ValueError("callback failed")

    node.create_timer(0.001, boom)
    with pytest.raises(ValueError, match="callback failed"):
        rclpy.spin_once(node, timeout_sec=1.0)


def test_undecodable_sample_is_dropped_not_fatal(node: Node) -> None:
    good: list[JointState] = []
    node.create_subscription(JointState, "js", good.append, 10)
    publisher = node.create_publisher(JointState, "js", 10)
    publisher.publish(b"\x00\x01\x00\x00\xff")
    publisher.publish(JointState(name=["ok"]))
    _spin_all_node(node)
    assert [m.name for m in good] == [["ok"]]


def test_multithreaded_reentrant_group_runs_callbacks_concurrently(node: Node) -> None:
    barrier = threading.Barrier(2, timeout=10)
    lock = threading.Lock()
    started: set[int] = set()
    passed: list[int] = []

    def meet(index: int) -> None:
        with lock:
            if index in started:
                return
            started.add(index)
        barrier.wait()  # returns only if both callbacks run at the same time
        passed.append(index)

    group = ReentrantCallbackGroup()
    for index in range(2):
        node.create_timer(0.005, lambda i=index: meet(i), callback_group=group)
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    deadline = time.monotonic() + 20
    while len(passed) < 2 and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.1)
    assert executor.shutdown(timeout_sec=10)
    assert sorted(passed) == [0, 1]


def test_multithreaded_mutually_exclusive_group_never_overlaps(node: Node) -> None:
    lock = threading.Lock()
    active = [0]
    peak = [0]
    runs = [0]

    def work() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.005)
        with lock:
            active[0] -= 1
            runs[0] += 1

    group = MutuallyExclusiveCallbackGroup()
    for _ in range(3):
        node.create_timer(0.001, work, callback_group=group)
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    while runs[0] < 15:
        executor.spin_once(timeout_sec=1.0)
    assert executor.shutdown(timeout_sec=10)
    assert peak[0] == 1


def test_multithreaded_callback_exception_surfaces_later(node: Node) -> None:
    def boom() -> None:
        raise RuntimeError("worker failed")

    node.create_timer(0.001, boom)
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    with pytest.raises(RuntimeError, match="worker failed"):
        for _ in range(200):
            executor.spin_once(timeout_sec=0.05)
    executor.shutdown(timeout_sec=5)


def test_spin_ends_when_context_shuts_down(node: Node) -> None:
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(1)
        if len(ticks) == 3:
            threading.Thread(target=rclpy.shutdown).start()

    node.create_timer(0.005, tick)
    outcome: list[str] = []

    def run() -> None:
        try:
            rclpy.spin(node)
            outcome.append("returned")
        except ExternalShutdownException:
            outcome.append("external shutdown")

    spinner = threading.Thread(target=run)
    spinner.start()
    spinner.join(timeout=20)
    assert not spinner.is_alive() and outcome and len(ticks) >= 3


def test_executor_shutdown_stops_spin_in_other_thread(node: Node) -> None:
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin)
    spinner.start()
    time.sleep(0.05)
    assert executor.shutdown()
    spinner.join(timeout=10)
    assert not spinner.is_alive()
    assert rclpy.ok()  # the context outlives the executor


def test_destroyed_entities(node: Node) -> None:
    got: list[object] = []
    subscription = node.create_subscription(JointState, "js", got.append, 10)
    publisher = node.create_publisher(JointState, "js", 10)
    assert node.destroy_subscription(subscription) and not node.destroy_subscription(subscription)
    publisher.publish(JointState())
    _spin_all_node(node)
    assert got == [] and publisher.get_subscription_count() == 0
    assert node.destroy_publisher(publisher)
    with pytest.raises(RCLError):
        publisher.publish(JointState())
    # only the /parameter_events publisher every node has (as in rclpy) is left
    assert [p.topic_name for p in node.publishers] == ["/parameter_events"]
    assert list(node.subscriptions) == []
