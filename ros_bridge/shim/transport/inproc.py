"""In-process transport: endpoints of one domain in one process, matched by topic, type and QoS.

Samples travel as CDR bytes, so every subscriber gets its own decoded copy, as over a network,
and a message mutated after `publish` cannot change what was delivered.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from ros_bridge.shim.message import Message
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.transport.base import Deliver
from ros_bridge.shim.transport.qos_match import EndpointQos, compatible, resolve_qos


@dataclass(eq=False)
class _Endpoint:
    bus: _Bus
    topic: str
    type_name: str
    qos: EndpointQos
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
    deliver: Deliver

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
    """All endpoints of one domain id in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: list[InprocWriter] = []
        self._readers: list[InprocReader] = []

    def add_writer(self, writer: InprocWriter) -> None:
        with self._lock:
            self._writers.append(writer)

    def add_reader(self, reader: InprocReader) -> None:
        with self._lock:
            self._readers.append(reader)
            late = (
                [w for w in self._writers if _matches(w, reader)]
                if reader.qos.transient_local
                else []
            )
        for writer in late:
            for payload in list(writer.history):
                reader.deliver(payload)

    def remove(self, endpoint: _Endpoint) -> None:
        with self._lock:
            endpoint.closed = True
            for endpoints in (self._writers, self._readers):
                if endpoint in endpoints:
                    endpoints.remove(endpoint)  # type: ignore[arg-type]

    def readers_of(self, writer: InprocWriter) -> list[InprocReader]:
        with self._lock:
            return [r for r in self._readers if _matches(writer, r)]

    def writers_of(self, reader: InprocReader) -> list[InprocWriter]:
        with self._lock:
            return [w for w in self._writers if _matches(w, reader)]


_BUSES: dict[int, _Bus] = {}
_BUSES_LOCK = threading.Lock()


class InprocTransport:
    """One context's endpoints on the process-wide bus of its domain."""

    name = "inproc"

    def __init__(self, domain_id: int) -> None:
        with _BUSES_LOCK:
            self._bus = _BUSES.setdefault(domain_id, _Bus())
        self._endpoints: list[_Endpoint] = []

    def create_writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> InprocWriter:
        writer = InprocWriter(self._bus, topic, msg_type._type_name_, resolve_qos(qos, writer=True))
        self._bus.add_writer(writer)
        self._endpoints.append(writer)
        return writer

    def create_reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> InprocReader:
        qos_r = resolve_qos(qos, writer=False)
        reader = InprocReader(self._bus, topic, msg_type._type_name_, qos_r, deliver=deliver)
        self._bus.add_reader(reader)
        self._endpoints.append(reader)
        return reader

    def close(self) -> None:
        for endpoint in self._endpoints:
            self._bus.remove(endpoint)
        self._endpoints.clear()
