"""In-process transport: endpoints of one domain in one process, matched by topic, type and QoS.

Samples travel as CDR bytes, so every subscriber gets its own decoded copy, as over a network,
and a message mutated after `publish` cannot change what was delivered. Topics are keyed by their
DDS names (`rt/...`, `rq/...Request`, `rr/...Reply`), and every endpoint and node goes into the
domain's graph, so the graph reads the same as over DDS.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from dataclasses import dataclass, field

from ros_bridge.shim.graph import (
    Endpoint,
    GraphCache,
    LocalNodes,
    dds_type_name,
    service_topics,
    wire_name,
)
from ros_bridge.shim.message import Message, ServiceType
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.transport.base import Deliver, ReplyDeliver, RequestDeliver
from ros_bridge.shim.transport.qos_match import EndpointQos, compatible, resolve_qos
from ros_bridge.shim.transport.service_endpoints import FramedClient, FramedServer

_WRITER_KIND, _READER_KIND, _PARTICIPANT_ID = b"\x03", b"\x04", b"\x00\x00\x01\xc1"


@dataclass(eq=False)
class _Endpoint:
    bus: _Bus
    topic: str  # the DDS topic name
    type_name: str
    qos: EndpointQos
    gid: bytes
    closed: bool = field(default=False, init=False)


@dataclass(eq=False)
class InprocWriter(_Endpoint):
    history: deque[bytes] = field(
        default_factory=deque, init=False
    )  # kept for TRANSIENT_LOCAL late joiners

    def write(self, payload: bytes) -> None:
        if self.closed:
            raise RCLError(f"publisher on {self.topic} is destroyed")
        if self.qos.transient_local:
            self.history.append(payload)
            while len(self.history) > self.qos.depth:
                self.history.popleft()
        for reader in self.bus.readers_of(self):
            reader.deliver(payload)

    def matched_count(self) -> int:
        return len(self.bus.readers_of(self))

    def close(self) -> None:
        self.bus.remove(self)


@dataclass(eq=False)
class InprocReader(_Endpoint):
    deliver: Deliver = field(kw_only=True)

    def matched_count(self) -> int:
        return len(self.bus.writers_of(self))

    def close(self) -> None:
        self.bus.remove(self)


def _matches(writer: InprocWriter, reader: InprocReader) -> bool:
    return (
        writer.topic == reader.topic
        and writer.type_name == reader.type_name
        and compatible(writer.qos, reader.qos)
    )


class _Bus:
    """All endpoints of one domain id in this process, and its graph."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: list[InprocWriter] = []
        self._readers: list[InprocReader] = []
        self.graph = GraphCache()

    def add(self, endpoint: _Endpoint, participant: bytes) -> None:
        is_reader = isinstance(endpoint, InprocReader)
        type_name = dds_type_name(endpoint.type_name)
        info = Endpoint(endpoint.gid, endpoint.topic, type_name, participant, is_reader)
        self.graph.add_endpoint(info)
        if isinstance(endpoint, InprocWriter):
            with self._lock:
                self._writers.append(endpoint)
            return
        assert isinstance(endpoint, InprocReader)
        with self._lock:
            self._readers.append(endpoint)
            late = (
                [w for w in self._writers if _matches(w, endpoint)]
                if endpoint.qos.transient_local
                else []
            )
        for writer in late:
            for payload in list(writer.history):
                endpoint.deliver(payload)

    def remove(self, endpoint: _Endpoint) -> None:
        with self._lock:
            endpoint.closed = True
            for endpoints in (self._writers, self._readers):
                if endpoint in endpoints:
                    endpoints.remove(endpoint)  # type: ignore[arg-type]
        self.graph.remove_endpoint(endpoint.gid)

    def readers_of(self, writer: InprocWriter) -> list[InprocReader]:
        with self._lock:
            return [r for r in self._readers if _matches(writer, r)]

    def writers_of(self, reader: InprocReader) -> list[InprocWriter]:
        with self._lock:
            return [w for w in self._writers if _matches(w, reader)]


_BUSES: dict[int, _Bus] = {}
_BUSES_LOCK = threading.Lock()


class InprocTransport:
    """One context's endpoints on the process-wide bus of its domain (a participant of it)."""

    name = "inproc"

    def __init__(self, domain_id: int) -> None:
        with _BUSES_LOCK:
            self._bus = _BUSES.setdefault(domain_id, _Bus())
        self._prefix = os.urandom(12)  # a GUID prefix of our own, as a DDS participant has
        self._entity_ids = itertools.count(1)
        self.gid = self._prefix + _PARTICIPANT_ID
        self.graph = self._bus.graph
        self.nodes = LocalNodes(lambda nodes: self.graph.update_participant(self.gid, nodes))
        self._endpoints: list[_Endpoint] = []

    def _gid(self, kind: bytes) -> bytes:
        return self._prefix + next(self._entity_ids).to_bytes(3, "big") + kind

    def _writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> InprocWriter:
        writer = InprocWriter(
            self._bus,
            topic,
            msg_type._type_name_,
            resolve_qos(qos, writer=True),
            self._gid(_WRITER_KIND),
        )
        self._bus.add(writer, self.gid)
        self._endpoints.append(writer)
        return writer

    def _reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> InprocReader:
        qos_r = resolve_qos(qos, writer=False)
        gid = self._gid(_READER_KIND)
        reader = InprocReader(self._bus, topic, msg_type._type_name_, qos_r, gid, deliver=deliver)
        self._bus.add(reader, self.gid)
        self._endpoints.append(reader)
        return reader

    def create_writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> InprocWriter:
        return self._writer(wire_name(topic, qos.avoid_ros_namespace_conventions), msg_type, qos)

    def create_reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> InprocReader:
        wire = wire_name(topic, qos.avoid_ros_namespace_conventions)
        return self._reader(wire, msg_type, qos, deliver)

    def create_service(
        self, name: str, srv_type: type[ServiceType], qos: QoSProfile, deliver: RequestDeliver
    ) -> FramedServer:
        request, reply = service_topics(name, qos.avoid_ros_namespace_conventions)
        server = FramedServer(deliver)
        reader = self._reader(request, srv_type.Request, qos, server.on_request)
        server.attach(reader, self._writer(reply, srv_type.Response, qos))
        return server

    def create_client(
        self, name: str, srv_type: type[ServiceType], qos: QoSProfile, deliver: ReplyDeliver
    ) -> FramedClient:
        request, reply = service_topics(name, qos.avoid_ros_namespace_conventions)
        client = FramedClient(deliver)
        writer = self._writer(request, srv_type.Request, qos)
        reader = self._reader(reply, srv_type.Response, qos, client.on_reply)
        client.attach(writer, reader, int.from_bytes(writer.gid[8:], "big"))
        return client

    def close(self) -> None:
        for endpoint in self._endpoints:
            self._bus.remove(endpoint)
        self._endpoints.clear()
        self.graph.remove_participant(self.gid)
