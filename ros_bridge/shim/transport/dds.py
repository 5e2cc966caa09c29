"""DDS transport through PyPI `cyclonedds`, following the conventions of rmw_cyclonedds.

Topics are `rt` + the ROS name, types `pkg::msg::dds_::Name_` (final, keyless, XCDR1 only),
QoS as rmw maps it (SYSTEM_DEFAULT = keep-last 1 / reliable / volatile, no autodispose), and
USER_DATA `typehash=RIHS01_...;` on endpoints and `enclave=/;` on the participant, as Iron+ nodes
advertise them. Services are rmw's pair of topics per service (`dds_service`), and the
participant announces its nodes on `ros_discovery_info` and learns everyone else's
(`dds_discovery`). Which network Cyclone uses is its own configuration (`CYCLONEDDS_URI`);
`LOOPBACK_CONFIG` keeps all traffic on `lo`.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from ros_bridge.shim.graph import GraphCache, LocalNodes, wire_name
from ros_bridge.shim.message import Message, ServiceType
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.transport.base import Deliver, ReplyDeliver, RequestDeliver
from ros_bridge.shim.transport.dds_discovery import DdsDiscovery
from ros_bridge.shim.transport.dds_receiver import Receiver
from ros_bridge.shim.transport.dds_service import dds_client, dds_service
from ros_bridge.shim.transport.dds_types import dds_twin, delete_entity, typehash, wrap
from ros_bridge.shim.transport.qos_match import EndpointQos, resolve_qos
from ros_bridge.shim.transport.service_endpoints import FramedClient, FramedServer

LOOPBACK_CONFIG = (
    '<CycloneDDS xmlns="https://cdds.io/config"><Domain Id="any">'
    '<General><Interfaces><NetworkInterface name="lo"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General>"
    "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<MaxAutoParticipantIndex>32</MaxAutoParticipantIndex>"
    '<Peers><Peer address="127.0.0.1"/></Peers></Discovery>'
    "</Domain></CycloneDDS>"
)


def dds_qos(qos: EndpointQos, user_data: str) -> Qos:
    """rmw_cyclonedds' reader/writer QoS for `qos`, with `user_data` ('typehash=RIHS01_...;')."""
    history = Policy.History.KeepAll if qos.keep_all else Policy.History.KeepLast(qos.depth)
    reliability = (
        Policy.Reliability.Reliable(max_blocking_time=duration(infinite=True))
        if qos.reliable
        else Policy.Reliability.BestEffort
    )
    lease = duration(nanoseconds=qos.lease_ns) if qos.lease_ns else duration(infinite=True)
    liveliness = (
        Policy.Liveliness.ManualByTopic(lease_duration=lease)
        if qos.manual_liveliness
        else Policy.Liveliness.Automatic(lease_duration=lease)
    )
    policies: list[Any] = [
        history,
        reliability,
        liveliness,
        Policy.WriterDataLifecycle(autodispose=False),
        Policy.DataRepresentation(use_cdrv0_representation=True),
        Policy.Userdata(data=user_data.encode()),
    ]
    if qos.transient_local:
        policies.append(Policy.Durability.TransientLocal)
        policies.append(
            Policy.DurabilityService(
                cleanup_delay=0,
                history=history,
                max_samples=-1,
                max_instances=-1,
                max_samples_per_instance=-1,
            )
        )
    else:
        policies.append(Policy.Durability.Volatile)
    if qos.lifespan_ns:
        policies.append(Policy.Lifespan(duration(nanoseconds=qos.lifespan_ns)))
    if qos.deadline_ns:
        policies.append(Policy.Deadline(duration(nanoseconds=qos.deadline_ns)))
    return Qos(*policies)


class DdsWriter:
    def __init__(self, writer: DataWriter, twin: type) -> None:
        self.entity = writer
        self.gid = writer.guid.bytes
        self._twin = twin
        self._closed = False

    def write(self, payload: bytes) -> None:
        if self._closed:
            raise RCLError("publisher is destroyed")
        self.entity.write(wrap(self._twin, payload))

    def matched_count(self) -> int:
        return self.entity.get_publication_matched_status().current_count

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            delete_entity(self.entity)


class DdsReader:
    """Hands every received sample to `deliver` from the participant's receiving thread; with
    `with_source`, also the writer's instance handle (`deliver(payload, handle)`)."""

    def __init__(
        self,
        participant: DomainParticipant,
        receiver: Receiver,
        topic: Topic,
        qos: Qos,
        deliver: Any,
        with_source: bool,
    ) -> None:
        self._deliver = deliver
        self._with_source = with_source
        self._receiver = receiver
        self._closed = False
        self.entity = DataReader(participant, topic, qos=qos)
        self.gid = self.entity.guid.bytes
        receiver.add(self.entity, self._on_sample, f"samples on {topic.name}")

    def _on_sample(self, sample: Any) -> None:
        if getattr(sample, "payload", None) is None:
            return  # an instance-state notice, no data
        if self._with_source:
            self._deliver(sample.payload, sample.sample_info.publication_handle)
        else:
            self._deliver(sample.payload)

    def matched_count(self) -> int:
        return self.entity.get_subscription_matched_status().current_count

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._receiver.remove(self.entity)
            delete_entity(self.entity)


class DdsTransport:
    """One DDS participant per context, in domain `domain_id`."""

    name = "dds"

    def __init__(self, domain_id: int) -> None:
        self._participant = DomainParticipant(
            domain_id, qos=Qos(Policy.Userdata(data=b"enclave=/;"))
        )
        self.gid = self._participant.guid.bytes
        self._topics: dict[tuple[str, str, bool], Topic] = {}
        self._endpoints: list[DdsWriter | DdsReader] = []
        self._lock = threading.Lock()
        self._service_ids = itertools.count(1)
        self._receiver = Receiver(self._participant)
        self.graph = GraphCache()
        self._discovery = DdsDiscovery(self, self._participant, self._receiver, self.graph)
        self.nodes = LocalNodes(self._discovery.publish)

    def _topic(self, wire: str, msg_type: type[Message], service_header: bool) -> Topic:
        key = (wire, msg_type._type_name_, service_header)
        with self._lock:
            if key not in self._topics:
                twin = dds_twin(msg_type, service_header)
                self._topics[key] = Topic(self._participant, wire, twin)
            return self._topics[key]

    def writer(
        self, wire: str, msg_type: type[Message], qos: QoSProfile, user_data: str, *, header: bool
    ) -> DdsWriter:
        """A writer on the DDS topic `wire` (services: `header` = rmw's request header)."""
        endpoint_qos = dds_qos(resolve_qos(qos, writer=True), user_data)
        topic = self._topic(wire, msg_type, header)
        writer = DdsWriter(
            DataWriter(self._participant, topic, qos=endpoint_qos), dds_twin(msg_type, header)
        )
        self._endpoints.append(writer)
        return writer

    def reader(
        self,
        wire: str,
        msg_type: type[Message],
        qos: QoSProfile,
        user_data: str,
        deliver: Any,
        *,
        header: bool,
    ) -> DdsReader:
        endpoint_qos = dds_qos(resolve_qos(qos, writer=False), user_data)
        topic = self._topic(wire, msg_type, header)
        reader = DdsReader(
            self._participant, self._receiver, topic, endpoint_qos, deliver, with_source=header
        )
        self._endpoints.append(reader)
        return reader

    def create_writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> DdsWriter:
        wire = wire_name(topic, qos.avoid_ros_namespace_conventions)
        return self.writer(wire, msg_type, qos, typehash(msg_type), header=False)

    def create_reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> DdsReader:
        wire = wire_name(topic, qos.avoid_ros_namespace_conventions)
        return self.reader(wire, msg_type, qos, typehash(msg_type), deliver, header=False)

    def endpoint_id(self) -> str:
        """A new client/service id, rmw's way: our GUID prefix and a counter, dotted hex."""
        raw = self.gid[:12] + next(self._service_ids).to_bytes(4, "big")
        return ".".join(f"{b:x}" for b in raw)

    def create_service(
        self, name: str, srv_type: type[ServiceType], qos: QoSProfile, deliver: RequestDeliver
    ) -> FramedServer:
        return dds_service(self, name, srv_type, qos, deliver)

    def create_client(
        self, name: str, srv_type: type[ServiceType], qos: QoSProfile, deliver: ReplyDeliver
    ) -> FramedClient:
        return dds_client(self, name, srv_type, qos, deliver)

    def close(self) -> None:
        self._receiver.close()
        for endpoint in self._endpoints:
            endpoint.close()
        self._endpoints.clear()
        self._discovery.close()
        self._topics.clear()
        delete_entity(self._participant)
