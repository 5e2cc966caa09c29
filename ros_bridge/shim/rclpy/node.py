"""rclpy.node.Node: publishers, subscriptions, timers, services, clients, parameters, logger,
clock and the graph.

As rcl does for every node: it announces itself and its endpoints in the graph, publishes its
log lines on /rosout (`enable_rosout`), its parameter changes on /parameter_events, and answers
the parameter services (`start_parameter_services`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ros_bridge.shim.graph import GraphCache
from ros_bridge.shim.message import Message, ServiceType
from ros_bridge.shim.parameter_services import ParameterService
from ros_bridge.shim.rcl_interfaces.msg import Log, ParameterEvent
from ros_bridge.shim.rclpy.arguments import RosArguments, parse_ros_args
from ros_bridge.shim.rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from ros_bridge.shim.rclpy.client import Client
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
from ros_bridge.shim.rclpy.node_graph import NodeGraph
from ros_bridge.shim.rclpy.node_parameters import NodeParameters
from ros_bridge.shim.rclpy.parameter import Parameter
from ros_bridge.shim.rclpy.publisher import Publisher
from ros_bridge.shim.rclpy.qos import (
    QoSProfile,
    profile_from,
    qos_profile_parameter_events,
    qos_profile_rosout_default,
    qos_profile_services_default,
)
from ros_bridge.shim.rclpy.service import Service
from ros_bridge.shim.rclpy.subscription import Subscription
from ros_bridge.shim.rclpy.timer import Timer
from ros_bridge.shim.rosout import ROSOUT_TOPIC, attach_rosout, detach_rosout

S_TO_NS = 1_000_000_000


class Node(NodeParameters, NodeGraph):
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
        self._init_entities()
        self._join_graph(enable_rosout)
        if automatically_declare_parameters_from_overrides:
            self.declare_parameters(
                "", [(n, p.value) for n, p in overrides.items() if n != "use_sim_time"]
            )
        if self.declare_parameter("use_sim_time", False).value:
            self._logger.warning("use_sim_time is not supported by the shim; using wall time")
        if start_parameter_services:
            ParameterService(self)

    def _init_entities(self) -> None:
        self._publishers: list[Publisher] = []
        self._subscriptions: list[Subscription] = []
        self._timers: list[Timer] = []
        self._services: list[Service] = []
        self._clients: list[Client] = []
        self._default_callback_group = MutuallyExclusiveCallbackGroup()
        self._clock = ROSClock()
        self._logger = RcutilsLogger(self.get_fully_qualified_name().lstrip("/").replace("/", "."))
        self._executor: Any = None
        self._destroyed = False

    def _join_graph(self, enable_rosout: bool) -> None:
        """Announces the node, then opens /rosout and /parameter_events, as rcl_node_init does."""
        transport = self._context.transport
        self._graph_nodes = transport.nodes  # kept: the node leaves the graph even after shutdown
        self._graph_key = (self._name, self._namespace)
        self._graph_nodes.add_node(self._name, self._namespace)
        self._rosout: tuple[Publisher, Any] | None = None
        if enable_rosout:
            publisher = self._make_publisher(Log, ROSOUT_TOPIC, qos_profile_rosout_default)
            self._rosout = (publisher, attach_rosout(self._logger, publisher))
        self._parameter_event_publisher = self.create_publisher(
            ParameterEvent, "/parameter_events", qos_profile_parameter_events
        )

    def _graph(self) -> GraphCache:
        return self._context.transport.graph

    def _associate(self, gids: tuple[bytes, ...], *, readers: tuple[bool, ...]) -> None:
        for gid, is_reader in zip(gids, readers, strict=True):
            self._graph_nodes.associate(self._graph_key, gid, is_reader=is_reader)

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
        publisher = self._make_publisher(msg_type, topic, qos_profile)
        self._publishers.append(publisher)
        return publisher

    def _make_publisher(
        self, msg_type: type[Message], topic: str, qos_profile: QoSProfile | int
    ) -> Publisher:
        qos = profile_from(qos_profile)
        name = self.resolve_topic_name(topic)
        writer = self._context.transport.create_writer(name, _check_type(msg_type), qos)
        publisher = Publisher(msg_type, name, qos, writer)
        self._associate(publisher.gids, readers=(False,))
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
        self._associate(subscription.gids, readers=(True,))
        self._subscriptions.append(subscription)
        return subscription

    def create_service(
        self,
        srv_type: type[ServiceType],
        srv_name: str,
        callback: Callable[[Any, Any], Any],
        *,
        qos_profile: QoSProfile = qos_profile_services_default,
        callback_group: CallbackGroup | None = None,
    ) -> Service:
        name = self.resolve_topic_name(srv_name)
        group = callback_group or self._default_callback_group
        service = Service(srv_type, name, callback, group, qos_profile, self._context.guard)
        server = self._context.transport.create_service(
            name, srv_type, qos_profile, service.deliver
        )
        return self._add_service_part(service, server, self._services)

    def create_client(
        self,
        srv_type: type[ServiceType],
        srv_name: str,
        *,
        qos_profile: QoSProfile = qos_profile_services_default,
        callback_group: CallbackGroup | None = None,
    ) -> Client:
        name = self.resolve_topic_name(srv_name)
        group = callback_group or self._default_callback_group
        client = Client(srv_type, name, group, qos_profile, self._context.guard)
        endpoint = self._context.transport.create_client(
            name, srv_type, qos_profile, client.deliver
        )
        return self._add_service_part(client, endpoint, self._clients)

    def _add_service_part(self, entity: Any, endpoint: Any, entities: list[Any]) -> Any:
        """Registers a Service or Client with its group, its transport endpoints and the graph."""
        entity.callback_group.add_entity(entity)
        entity.attach(endpoint)
        self._associate(entity.gids, readers=(True, False))
        entities.append(entity)
        return entity

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

    @property
    def services(self) -> Iterator[Service]:
        yield from self._services

    @property
    def clients(self) -> Iterator[Client]:
        yield from self._clients

    def destroy_publisher(self, publisher: Publisher) -> bool:
        return self._destroy(self._publishers, publisher)

    def destroy_subscription(self, subscription: Subscription) -> bool:
        return self._destroy(self._subscriptions, subscription)

    def destroy_timer(self, timer: Timer) -> bool:
        return self._destroy(self._timers, timer)

    def destroy_service(self, service: Service) -> bool:
        return self._destroy(self._services, service)

    def destroy_client(self, client: Client) -> bool:
        return self._destroy(self._clients, client)

    def _destroy(self, entities: list[Any], entity: Any) -> bool:
        if entity not in entities:
            return False
        entities.remove(entity)
        for gid in getattr(entity, "gids", ()):
            self._graph_nodes.dissociate(gid)
        entity.destroy()
        return True

    def destroy_node(self) -> None:
        """Destroys every entity of the node, leaves the graph and its executor."""
        if self._destroyed:
            return
        self._destroyed = True
        self._parameter_event_publisher = None
        kinds = (self._timers, self._clients, self._services, self._subscriptions, self._publishers)
        for entities in kinds:
            for entity in list(entities):
                self._destroy(entities, entity)
        if self._rosout is not None:
            publisher, handler = self._rosout
            detach_rosout(self._logger, handler)
            self._destroy([publisher], publisher)
        self._graph_nodes.remove_node(self._name, self._namespace)
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
