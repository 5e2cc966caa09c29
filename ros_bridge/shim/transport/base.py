"""What a transport offers the shim: writers and readers of serialized CDR samples on named topics,
the two endpoint pairs of services and clients, and the ROS graph of its domain.

Topic names are ROS names ('/camera/image_raw'); a transport maps them to its own naming.
Readers hand each received sample to `deliver` from whatever thread the transport uses. Every
endpoint has a GID (16 bytes, its DDS GUID), which is how a node names its endpoints in the graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ros_bridge.shim.graph import GraphCache, LocalNodes
    from ros_bridge.shim.message import Message, ServiceType
    from ros_bridge.shim.rclpy.qos import QoSProfile
    from ros_bridge.shim.service_wire import RequestHeader

Deliver = Callable[[bytes], None]
# (header, bare request sample, source: what the transport needs to find the client again)
RequestDeliver = Callable[["RequestHeader", bytes, Any], None]
ReplyDeliver = Callable[[int, bytes], None]  # (request number, bare reply sample)


class Writer(Protocol):
    gid: bytes

    def write(self, payload: bytes) -> None: ...

    def matched_count(self) -> int: ...

    def close(self) -> None: ...


class Reader(Protocol):
    gid: bytes

    def matched_count(self) -> int: ...

    def close(self) -> None: ...


class ServiceServer(Protocol):
    gids: tuple[bytes, bytes]  # (its reader, its writer): request reader, reply writer

    def reply(self, header: RequestHeader, sample: bytes, source: Any) -> None: ...

    def close(self) -> None: ...


class ServiceClient(Protocol):
    gids: tuple[bytes, bytes]  # (its reader, its writer): reply reader, request writer

    def request(self, sample: bytes) -> int: ...

    def is_ready(self) -> bool: ...

    def close(self) -> None: ...


class Transport(Protocol):
    name: str
    graph: GraphCache  # the domain as this participant sees it
    nodes: LocalNodes  # this participant's nodes, announced to the others

    def create_writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> Writer: ...

    def create_reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> Reader: ...

    def create_service(
        self, name: str, srv_type: type[ServiceType], qos: QoSProfile, deliver: RequestDeliver
    ) -> ServiceServer: ...

    def create_client(
        self, name: str, srv_type: type[ServiceType], qos: QoSProfile, deliver: ReplyDeliver
    ) -> ServiceClient: ...

    def close(self) -> None: ...
