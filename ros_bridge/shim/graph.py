"""The ROS 2 graph as rmw_dds_common keeps it: which nodes exist and which endpoints are theirs.

DDS discovery alone knows participants and their readers and writers (topic, type, GUID). ROS 2
adds nodes: each participant publishes a `ParticipantEntitiesInfo` on `ros_discovery_info` naming
its nodes and, per node, the GIDs of its readers and writers (a GID is the endpoint's 16-byte DDS
GUID). `LocalNodes` is one participant's own half (what it publishes), `GraphCache` the domain as
this participant sees it; both transports feed a cache, so `Node.get_node_names()` and
`count_publishers()` answer from it as rclpy does from rmw's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ros_bridge.shim.rmw_dds_common.msg import Gid, NodeEntitiesInfo, ParticipantEntitiesInfo

TOPIC_PREFIX = "rt"
REQUEST_PREFIX, REQUEST_SUFFIX = "rq", "Request"
REPLY_PREFIX, REPLY_SUFFIX = "rr", "Reply"


@dataclass(frozen=True)
class Endpoint:
    """A reader or writer seen by discovery: its DDS topic and type names, as on the wire."""

    gid: bytes
    topic: str  # "rt/camera/image_raw", "rq/vla_bridge/get_parametersRequest"
    type_name: str  # "sensor_msgs::msg::dds_::Image_"
    participant: bytes
    is_reader: bool


@dataclass
class NodeEntities:
    namespace: str
    name: str
    readers: list[bytes] = field(default_factory=list)
    writers: list[bytes] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.namespace)


def participant_info(gid: bytes, nodes: list[NodeEntities]) -> ParticipantEntitiesInfo:
    return ParticipantEntitiesInfo(
        gid=Gid(data=gid),
        node_entities_info_seq=[
            NodeEntitiesInfo(
                node_namespace=n.namespace,
                node_name=n.name,
                reader_gid_seq=[Gid(data=g) for g in n.readers],
                writer_gid_seq=[Gid(data=g) for g in n.writers],
            )
            for n in nodes
        ],
    )


def nodes_of(info: ParticipantEntitiesInfo) -> list[NodeEntities]:
    return [
        NodeEntities(
            n.node_namespace,
            n.node_name,
            [g.data.tobytes() for g in n.reader_gid_seq],
            [g.data.tobytes() for g in n.writer_gid_seq],
        )
        for n in info.node_entities_info_seq
    ]


class LocalNodes:
    """This participant's nodes and their endpoints; `on_change` gets every new state, in order
    (it publishes it), under the lock, so two updates cannot overtake each other."""

    def __init__(self, on_change: Callable[[list[NodeEntities]], None]) -> None:
        self._nodes: list[NodeEntities] = []
        self._on_change = on_change
        self._lock = threading.Lock()

    def add_node(self, name: str, namespace: str) -> None:
        with self._lock:
            self._nodes.append(NodeEntities(namespace, name))
            self._changed()

    def remove_node(self, name: str, namespace: str) -> None:
        with self._lock:
            self._nodes = [n for n in self._nodes if n.key != (name, namespace)]
            self._changed()

    def associate(self, node: tuple[str, str], gid: bytes, *, is_reader: bool) -> None:
        with self._lock:
            for entry in self._nodes:
                if entry.key == node:
                    (entry.readers if is_reader else entry.writers).append(gid)
            self._changed()

    def dissociate(self, gid: bytes) -> None:
        with self._lock:
            for entry in self._nodes:
                entry.readers = [g for g in entry.readers if g != gid]
                entry.writers = [g for g in entry.writers if g != gid]
            self._changed()

    def _changed(self) -> None:
        snapshot = [
            NodeEntities(n.namespace, n.name, list(n.readers), list(n.writers)) for n in self._nodes
        ]
        self._on_change(snapshot)


class GraphCache:
    """Every participant's nodes and every discovered endpoint of one domain."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[bytes, list[NodeEntities]] = {}  # by participant GID
        self._endpoints: dict[bytes, Endpoint] = {}

    def update_participant(self, gid: bytes, nodes: list[NodeEntities]) -> None:
        with self._lock:
            self._nodes[gid] = nodes

    def remove_participant(self, gid: bytes) -> None:
        with self._lock:
            self._nodes.pop(gid, None)

    def add_endpoint(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._endpoints[endpoint.gid] = endpoint

    def remove_endpoint(self, gid: bytes) -> None:
        with self._lock:
            self._endpoints.pop(gid, None)

    def node_names(self) -> list[tuple[str, str]]:
        """(name, namespace) of every node, in discovery order."""
        with self._lock:
            return [n.key for nodes in self._nodes.values() for n in nodes]

    def endpoints(self, topic: str, *, is_reader: bool) -> list[Endpoint]:
        with self._lock:
            return [
                e for e in self._endpoints.values() if e.topic == topic and e.is_reader == is_reader
            ]

    def all_endpoints(self) -> list[Endpoint]:
        with self._lock:
            return list(self._endpoints.values())

    def node_endpoints(self, name: str, namespace: str, *, is_reader: bool) -> list[Endpoint]:
        """The endpoints the node (name, namespace) announced that discovery has seen."""
        with self._lock:
            gids = [
                g
                for nodes in self._nodes.values()
                for n in nodes
                if n.key == (name, namespace)
                for g in (n.readers if is_reader else n.writers)
            ]
            return [self._endpoints[g] for g in gids if g in self._endpoints]


def wire_name(
    name: str, avoid_ros_conventions: bool, prefix: str = TOPIC_PREFIX, suffix: str = ""
) -> str:
    """The DDS topic of a ROS topic (`rt` + name) or of a service's request or reply topic
    (`rq` + name + `Request`, `rr` + name + `Reply`); the bare name with
    `avoid_ros_namespace_conventions`."""
    return name + suffix if avoid_ros_conventions else prefix + name + suffix


def service_topics(name: str, avoid_ros_conventions: bool) -> tuple[str, str]:
    """The DDS topics of service `name`: (requests, replies)."""
    return (
        wire_name(name, avoid_ros_conventions, REQUEST_PREFIX, REQUEST_SUFFIX),
        wire_name(name, avoid_ros_conventions, REPLY_PREFIX, REPLY_SUFFIX),
    )


def dds_type_name(ros_type_name: str) -> str:
    """'sensor_msgs/msg/Image' -> 'sensor_msgs::msg::dds_::Image_' (rmw's mangling)."""
    package, kind, name = ros_type_name.split("/")
    return f"{package}::{kind}::dds_::{name}_"


def ros_name(topic: str) -> tuple[str, str] | None:
    """('topic' | 'request' | 'reply', ROS name) for a DDS topic name (a service's request or
    reply topic gives the service's name); None for DDS-only topics."""
    if topic.startswith(TOPIC_PREFIX + "/"):
        return "topic", topic[len(TOPIC_PREFIX) :]
    for kind, prefix, suffix in (
        ("request", REQUEST_PREFIX, REQUEST_SUFFIX),
        ("reply", REPLY_PREFIX, REPLY_SUFFIX),
    ):
        if topic.startswith(prefix + "/") and topic.endswith(suffix):
            return kind, topic[len(prefix) : -len(suffix)]
    return None


def ros_type(dds_type: str) -> str:
    """'sensor_msgs::msg::dds_::Image_' -> 'sensor_msgs/msg/Image'; a service's request or reply
    type -> the service ('rcl_interfaces/srv/GetParameters'); unknown shapes unchanged."""
    parts = dds_type.split("::")
    if len(parts) != 4 or parts[2] != "dds_" or not parts[3].endswith("_"):
        return dds_type
    name = parts[3][:-1]
    if parts[1] == "srv":
        name = name.removesuffix("_Request").removesuffix("_Response")
    return f"{parts[0]}/{parts[1]}/{name}"


def names_and_types(
    endpoints: list[Endpoint], kinds: tuple[str, ...]
) -> list[tuple[str, list[str]]]:
    """Sorted (ROS name, sorted types) of the endpoints whose topic is of one of `kinds`
    ('topic', 'request', 'reply': see `ros_name`)."""
    found: dict[str, set[str]] = {}
    for endpoint in endpoints:
        named = ros_name(endpoint.topic)
        if named is not None and named[0] in kinds:
            found.setdefault(named[1], set()).add(ros_type(endpoint.type_name))
    return [(name, sorted(types)) for name, types in sorted(found.items())]
