"""Services over DDS as rmw_cyclonedds lays them out.

A service `/n/s` is a request topic `rq/n/sRequest` and a reply topic `rr/n/sReply`, their types
the request and response with rmw's request header in front (`pkg::srv::dds_::S_Request_`,
`..._Response_`), with the services' default QoS as given. A server's two endpoints carry
`serviceid=<id>;` in their USER_DATA and a client's `clientid=<id>;`, so that each side can tell
which reader and writer belong together: a client is ready once it has matched a request reader and
the reply writer with the same service id, and a server holds a reply until it has matched the
reply reader of the client that sent the request (a reply sent before that would be lost).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from cyclonedds.core import Policy

from ros_bridge.shim.graph import (
    REPLY_PREFIX,
    REPLY_SUFFIX,
    REQUEST_PREFIX,
    REQUEST_SUFFIX,
    wire_name,
)
from ros_bridge.shim.message import Message, ServiceType
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.transport.base import ReplyDeliver, RequestDeliver
from ros_bridge.shim.transport.dds_types import typehash
from ros_bridge.shim.transport.service_endpoints import FramedClient, FramedServer

_REPLY_WAIT_S = 1.0  # longest a reply waits for the client's reply reader to be matched
_POLL_S = 0.01


class _Endpoints(Protocol):
    """What the DDS transport provides here (DdsTransport; a Protocol to keep imports one-way)."""

    def writer(
        self, wire: str, msg_type: type[Message], qos: QoSProfile, user_data: str, *, header: bool
    ) -> Any: ...

    def reader(
        self,
        wire: str,
        msg_type: type[Message],
        qos: QoSProfile,
        user_data: str,
        deliver: Any,
        *,
        header: bool,
    ) -> Any: ...

    def endpoint_id(self) -> str: ...


def user_data(qos: Any) -> dict[str, str]:
    """USER_DATA `key=value;...` as a dict ({} when there is none)."""
    try:
        raw = qos[Policy.Userdata].data
    except (KeyError, TypeError):
        return {}
    pairs = (item.partition("=") for item in raw.decode(errors="replace").split(";") if item)
    return {key: value for key, _, value in pairs}


def _topics(name: str, qos: QoSProfile) -> tuple[str, str]:
    avoid = qos.avoid_ros_namespace_conventions
    return (
        wire_name(name, avoid, REQUEST_PREFIX, REQUEST_SUFFIX),
        wire_name(name, avoid, REPLY_PREFIX, REPLY_SUFFIX),
    )


def dds_service(
    transport: _Endpoints,
    name: str,
    srv_type: type[ServiceType],
    qos: QoSProfile,
    deliver: RequestDeliver,
) -> FramedServer:
    request, reply = _topics(name, qos)
    data = typehash(srv_type) + f"serviceid={transport.endpoint_id()};"
    server = FramedServer(deliver, before_reply=lambda source: _await_client(server, source))
    reader = transport.reader(request, srv_type.Request, qos, data, server.on_request, header=True)
    writer = transport.writer(reply, srv_type.Response, qos, data, header=True)
    server.attach(reader, writer)
    return server


def _await_client(server: FramedServer, source: Any) -> None:
    """Waits until the reply writer has matched the requesting client's reply reader."""
    assert server.reader is not None and server.writer is not None
    request_reader, reply_writer = server.reader.entity, server.writer.entity
    sender = request_reader.get_matched_publication_data(source)
    client = user_data(sender.qos).get("clientid") if sender is not None else None
    if client is None:  # a client that does not say which reader is its own: no way to wait
        return
    deadline = time.monotonic() + _REPLY_WAIT_S
    while time.monotonic() < deadline:
        for handle in reply_writer.get_matched_subscriptions():
            reader = reply_writer.get_matched_subscription_data(handle)
            if reader is not None and user_data(reader.qos).get("clientid") == client:
                return
        time.sleep(_POLL_S)


def dds_client(
    transport: _Endpoints,
    name: str,
    srv_type: type[ServiceType],
    qos: QoSProfile,
    deliver: ReplyDeliver,
) -> FramedClient:
    request, reply = _topics(name, qos)
    data = typehash(srv_type) + f"clientid={transport.endpoint_id()};"
    client = FramedClient(deliver, ready=lambda: _service_ready(client))
    writer = transport.writer(request, srv_type.Request, qos, data, header=True)
    reader = transport.reader(reply, srv_type.Response, qos, data, client.on_reply, header=True)
    # rmw's client id: the request writer's instance handle (a uint64; Python may see it signed)
    client.attach(writer, reader, writer.entity.instance_handle % 2**64)
    return client


def _service_ready(client: FramedClient) -> bool:
    """A request reader is matched, and a reply writer of the same service (rmw's rule)."""
    assert client.reader is not None and client.writer is not None
    request_writer, reply_reader = client.writer.entity, client.reader.entity
    readers = [
        request_writer.get_matched_subscription_data(h)
        for h in request_writer.get_matched_subscriptions()
    ]
    writers = [
        reply_reader.get_matched_publication_data(h)
        for h in reply_reader.get_matched_publications()
    ]
    if not readers or not writers:
        return False
    services = {user_data(r.qos).get("serviceid") for r in readers if r is not None} - {None}
    if not services:  # services that announce no id: any matched pair will do
        return True
    return any(w is not None and user_data(w.qos).get("serviceid") in services for w in writers)
