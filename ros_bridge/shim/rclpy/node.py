"""rclpy.node.Node: publishers, subscriptions, timers, parameters, logger and clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ros_bridge.shim.message import Message
from ros_bridge.shim.rclpy.arguments import RosArguments, parse_ros_args
from ros_bridge.shim.rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from ros_bridge.shim.rclpy.clock import Clock, ROSClock
from ros_bridge.shim.rclpy.context import Context, get_default_context
from ros_bridge.shim.rclpy.exceptions import NotInitializedException
from ros_bridge.shim.rclpy.logging import RcutilsLogger
from ros_bridge.shim.rclpy.names import (
    expand_topic_name,
    fully_qualified_node_name,
    normalize_namespace,
    remap_topic_name,
    validate_node_name,
)
from ros_bridge.shim.rclpy.node_parameters import NodeParameters
from ros_bridge.shim.rclpy.parameter import Parameter
from ros_bridge.shim.rclpy.publisher import Publisher
from ros_bridge.shim.rclpy.qos import QoSProfile, profile_from
from ros_bridge.shim.rclpy.subscription import Subscription
from ros_bridge.shim.rclpy.timer import Timer

S_TO_NS = 1_000_000_000


class Node(NodeParameters):
    """A ROS 2 node. Construct after `rclpy.init()`; give it to an executor to run callbacks."""

    def __init__(
        self,
        node_name: str,
        *,
        context: Context | None = None,
        cli_args: list[str] | None = None,
        namespace: str | None = None,
        use_global_arguments: bool = True,
        enable_rosout: bool = True,
        start_parameter_services: bool = True,
        parameter_overrides: list[Parameter] | None = None,
        allow_undeclared_parameters: bool = False,
        automatically_declare_parameters_from_overrides: bool = False,
        enable_logger_service: bool = False,
    ) -> None:
        self._context = context if context is not None else get_default_context()
        if not self._context.ok():
            raise NotInitializedException("cannot create node")
        arguments = RosArguments()
        if use_global_arguments:
            arguments.extend(self._context.global_arguments)
        arguments.extend(parse_ros_args(cli_args))
        self._remaps = arguments.node_remaps(node_name)
        special = {r.source: r.target for r in reversed(self._remaps) if r.source.startswith("__")}
        self._name = validate_node_name(special.get("__node", node_name))
        self._namespace = normalize_namespace(special.get("__ns", namespace))
        fq_name = self.get_fully_qualified_name()
        overrides = {
            name: _override(name, value)
            for name, value in arguments.node_params(self._name, fq_name).items()
        }
        overrides.update({p.name: p for p in parameter_overrides or []})
        self._init_parameters(overrides, allow_undeclared_parameters)
        self._publishers: list[Publisher] = []
        self._subscriptions: list[Subscription] = []
        self._timers: list[Timer] = []
        self._default_callback_group = MutuallyExclusiveCallbackGroup()
        self._clock = ROSClock()
        self._logger = RcutilsLogger(self.get_fully_qualified_name().lstrip("/").replace("/", "."))
        self._executor: Any = None
        self._destroyed = False
        if automatically_declare_parameters_from_overrides:
            self.declare_parameters(
                "", [(n, p.value) for n, p in overrides.items() if n != "use_sim_time"]
            )
        if self.declare_parameter("use_sim_time", False).value:
            self._logger.warning("use_sim_time is not supported by the shim; using wall time")

    # -- identity -------------------------------------------------------------------------
    def get_name(self) -> str:
        return self._name

    def get_namespace(self) -> str:
        return self._namespace

    def get_fully_qualified_name(self) -> str:
        return fully_qualified_node_name(self._name, self._namespace)

    @property
    def context(self) -> Context:
        return self._context

    @property
    def default_callback_group(self) -> CallbackGroup:
        return self._default_callback_group

    @property
    def executor(self) -> Any:
        return self._executor

    @executor.setter
    def executor(self, new_executor: Any) -> None:
        if self._executor is not None and self._executor is not new_executor:
            self._executor.remove_node(self)
        self._executor = new_executor
        if new_executor is not None:
            new_executor.add_node(self)

    def get_logger(self) -> RcutilsLogger:
        return self._logger

    def get_clock(self) -> Clock:
        return self._clock

    def resolve_topic_name(self, topic: str, *, only_expand: bool = False) -> str:
        expanded = expand_topic_name(topic, self._name, self._namespace)
        if only_expand:
            return expanded
        return remap_topic_name(expanded, self._remaps, self._name, self._namespace)

    # -- entities -------------------------------------------------------------------------
    def create_publisher(
        self,
        msg_type: type[Message],
        topic: str,
        qos_profile: QoSProfile | int,
        *,
        callback_group: CallbackGroup | None = None,
        event_callbacks: Any = None,
        qos_overriding_options: Any = None,
        publisher_class: Any = None,
    ) -> Publisher:
        qos = profile_from(qos_profile)
        name = self.resolve_topic_name(topic)
        writer = self._context.transport.create_writer(name, _check_type(msg_type), qos)
        publisher = Publisher(msg_type, name, qos, writer)
        self._publishers.append(publisher)
        return publisher

    def create_subscription(
        self,
        msg_type: type[Message],
        topic: str,
        callback: Callable[[Any], None],
        qos_profile: QoSProfile | int,
        *,
        callback_group: CallbackGroup | None = None,
        event_callbacks: Any = None,
        qos_overriding_options: Any = None,
        raw: bool = False,
    ) -> Subscription:
        qos = profile_from(qos_profile)
        name = self.resolve_topic_name(topic)
        group = callback_group or self._default_callback_group
        subscription = Subscription(
            _check_type(msg_type), name, callback, group, qos, self._context.guard, raw=raw
        )
        group.add_entity(subscription)
        subscription.attach(
            self._context.transport.create_reader(name, msg_type, qos, subscription.deliver)
        )
        self._subscriptions.append(subscription)
        return subscription

    def create_timer(
        self,
        timer_period_sec: float,
        callback: Callable[[], Any] | None,
        callback_group: CallbackGroup | None = None,
        clock: Clock | None = None,
        autostart: bool = True,
    ) -> Timer:
        group = callback_group or self._default_callback_group
        timer = Timer(
            callback,
            group,
            int(timer_period_sec * S_TO_NS),
            clock or self._clock,
            autostart=autostart,
            on_change=self._context.wake,
        )
        group.add_entity(timer)
        self._timers.append(timer)
        self._context.wake()
        return timer

    @property
    def publishers(self) -> Iterator[Publisher]:
        yield from self._publishers

    @property
    def subscriptions(self) -> Iterator[Subscription]:
        yield from self._subscriptions

    @property
    def timers(self) -> Iterator[Timer]:
        yield from self._timers

    def count_publishers(self, topic_name: str) -> int:
        """Matched writers seen by this node's subscriptions on `topic_name` (shim: local view)."""
        name = self.resolve_topic_name(topic_name)
        return max(
            (s.get_publisher_count() for s in self._subscriptions if s.topic_name == name),
            default=0,
        )

    def count_subscribers(self, topic_name: str) -> int:
        """Matched readers seen by this node's publishers on `topic_name` (shim: local view)."""
        name = self.resolve_topic_name(topic_name)
        return max(
            (p.get_subscription_count() for p in self._publishers if p.topic_name == name),
            default=0,
        )

    def destroy_publisher(self, publisher: Publisher) -> bool:
        return _destroy(self._publishers, publisher)

    def destroy_subscription(self, subscription: Subscription) -> bool:
        return _destroy(self._subscriptions, subscription)

    def destroy_timer(self, timer: Timer) -> bool:
        return _destroy(self._timers, timer)

    def destroy_node(self) -> None:
        """Destroys every entity of the node and leaves its executor."""
        if self._destroyed:
            return
        self._destroyed = True
        for entities in (self._timers, self._subscriptions, self._publishers):
            for entity in list(entities):
                _destroy(entities, entity)
        if self._executor is not None:
            self._executor.remove_node(self)
            self._executor = None


def _override(name: str, value: Any) -> Parameter:
    try:
        return Parameter(name, value=value)
    except TypeError:  # e.g. a mixed list: rcl keeps such a value as its text
        return Parameter(name, value=str(value))


def _check_type(msg_type: Any) -> type[Message]:
    if not (isinstance(msg_type, type) and issubclass(msg_type, Message) and msg_type._type_name_):
        raise TypeError(f"{msg_type!r} is not a message type of the shim")
    return msg_type


def _destroy(entities: list[Any], entity: Any) -> bool:
    if entity not in entities:
        return False
    entities.remove(entity)
    entity.destroy()
    return True
