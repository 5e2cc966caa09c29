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
from typing import Any

from cyclonedds.core import Policy

from ros_bridge.shim.graph import service_topics
from ros_bridge.shim.message import ServiceType
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.transport.base import ReplyDeliver, RequestDeliver
from ros_bridge.shim.transport.dds_types import typehash
from ros_bridge.shim.transport.service_endpoints import FramedClient, FramedServer

_REPLY_WAIT_S = 1.0  # longest a reply waits for the client's reply reader to be matched
_POLL_S = 0.01


def user_data(qos: Any) -> dict[str, str]:
    """USER_DATA `key=value;...` as a dict ({} when there is none)."""
    try:
        policy = qos[Policy.Userdata]
    except (KeyError, TypeError):
        return {}
    raw = getattr(policy, "data", None)  # an endpoint without USER_DATA may hand back None
    if not raw:
        return {}
    pairs = (item.partition("=") for item in raw.decode(errors="replace").split(";") if item)
    return {key: value for key, _, value in pairs}


def dds_service(
    transport: Any,  # DdsTransport (not imported: it imports this module)
    name: str,
    srv_type: type[ServiceType],
    qos: QoSProfile,
    deliver: RequestDeliver,
) -> FramedServer:
    request, reply = service_topics(name, qos.avoid_ros_namespace_conventions)
    data = typehash(srv_type) + f"serviceid={transport.endpoint_id()};"
    server = FramedServer(deliver, before_reply=lambda source: _await_client(server, source))
    reader = transport.reader(request, srv_type.Request, qos, data, server.on_request, header=True)
    writer = transport.writer(reply, srv_type.Response, qos, data, header=True)
    server.attach(reader, writer)
    return server


def _await_client(server: FramedServer, source: Any) -> None:
    """Waits until the reply writer has matched the requesting client's reply reader."""
    assert server.reader is not None and server.writer is not None
    sender = server.reader.entity.get_matched_publication_data(source)
    client = user_data(sender.qos).get("clientid") if sender is not None else None
    if client is None:  # a client that does not say which reader is its own: no way to wait
        return
    deadline = time.monotonic() + _REPLY_WAIT_S
    while client not in _ids(_matched_readers(server.writer.entity), "clientid"):
        if time.monotonic() >= deadline:
            return
        time.sleep(_POLL_S)


def _matched_readers(writer: Any) -> list[Any]:
    return [writer.get_matched_subscription_data(h) for h in writer.get_matched_subscriptions()]


def _matched_writers(reader: Any) -> list[Any]:
    return [reader.get_matched_publication_data(h) for h in reader.get_matched_publications()]


def _ids(endpoints: list[Any], key: str) -> set[str]:
    """The `key=` ids in the USER_DATA of `endpoints` (those still known)."""
    found = (user_data(e.qos).get(key) for e in endpoints if e is not None)
    return {value for value in found if value is not None}


def dds_client(
    transport: Any,  # DdsTransport
    name: str,
    srv_type: type[ServiceType],
    qos: QoSProfile,
    deliver: ReplyDeliver,
) -> FramedClient:
    request, reply = service_topics(name, qos.avoid_ros_namespace_conventions)
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
    readers = _matched_readers(client.writer.entity)
    writers = _matched_writers(client.reader.entity)
    if not readers or not writers:
        return False
    services = _ids(readers, "serviceid")
    # services that announce no id: any matched pair will do
    return not services or bool(services & _ids(writers, "serviceid"))
