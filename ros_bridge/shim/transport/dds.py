"""DDS transport through PyPI `cyclonedds`, following the conventions of rmw_cyclonedds.

Topics are `rt` + the ROS name, types `pkg::msg::dds_::Name_` (final, keyless, XCDR1 only),
QoS as rmw maps it (SYSTEM_DEFAULT = keep-last 1 / reliable / volatile, no autodispose), and
USER_DATA `typehash=RIHS01_...;` on endpoints and `enclave=/;` on the participant, as Iron+ nodes
advertise them. Which network Cyclone uses is its own configuration (`CYCLONEDDS_URI`);
`LOOPBACK_CONFIG` keeps all traffic on `lo`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from cyclonedds.core import Listener, Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from ros_bridge.shim.message import Message
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.qos import QoSProfile
from ros_bridge.shim.transport.base import Deliver
from ros_bridge.shim.transport.dds_types import dds_twin, wrap
from ros_bridge.shim.transport.qos_match import EndpointQos, resolve_qos

ROS_TOPIC_PREFIX = "rt"
LOOPBACK_CONFIG = (
    '<CycloneDDS xmlns="https://cdds.io/config"><Domain Id="any">'
    '<General><Interfaces><NetworkInterface name="lo"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General>"
    "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<MaxAutoParticipantIndex>32</MaxAutoParticipantIndex>"
    '<Peers><Peer address="127.0.0.1"/></Peers></Discovery>'
    "</Domain></CycloneDDS>"
)
_TAKE_BATCH = 64
_log = logging.getLogger(__name__)


def dds_topic_name(ros_topic: str, qos: QoSProfile) -> str:
    return ros_topic if qos.avoid_ros_namespace_conventions else ROS_TOPIC_PREFIX + ros_topic


def dds_qos(qos: EndpointQos, type_hash: str) -> Qos:
    """rmw_cyclonedds' reader/writer QoS for `qos`, plus the ROS 2 type-hash user data."""
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
        Policy.Userdata(data=f"typehash={type_hash};".encode()),
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


def _delete(entity: Any) -> None:
    # cyclonedds deletes an entity in __del__, which is idempotent; call it now rather than
    # whenever the garbage collector breaks the listener's reference cycle.
    entity.__del__()


class DdsWriter:
    def __init__(self, writer: DataWriter, twin: type) -> None:
        self._writer = writer
        self._twin = twin
        self._closed = False

    def write(self, payload: bytes) -> None:
        if self._closed:
            raise RCLError("publisher is destroyed")
        self._writer.write(wrap(self._twin, payload))

    def matched_count(self) -> int:
        return self._writer.get_publication_matched_status().current_count

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _delete(self._writer)


class DdsReader:
    """Hands every received sample to `deliver` from Cyclone's receive thread."""

    def __init__(self, participant: DomainParticipant, topic: Topic, qos: Qos, deliver: Deliver):
        self._deliver = deliver
        self._closed = False
        listener = Listener(on_data_available=self._on_data_available)
        self._reader = DataReader(participant, topic, qos=qos, listener=listener)

    def _on_data_available(self, reader: DataReader) -> None:
        try:
            while samples := reader.take(N=_TAKE_BATCH):
                for sample in samples:
                    if getattr(sample, "payload", None) is not None:
                        self._deliver(sample.payload)
        except Exception:  # an exception must not unwind into Cyclone's thread
            _log.exception("dropping DDS samples after a receive error")

    def matched_count(self) -> int:
        return self._reader.get_subscription_matched_status().current_count

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _delete(self._reader)


class DdsTransport:
    """One DDS participant per context, in domain `domain_id`."""

    name = "dds"

    def __init__(self, domain_id: int) -> None:
        self._participant = DomainParticipant(
            domain_id, qos=Qos(Policy.Userdata(data=b"enclave=/;"))
        )
        self._topics: dict[tuple[str, str], Topic] = {}
        self._endpoints: list[DdsWriter | DdsReader] = []
        self._lock = threading.Lock()

    def _topic(self, ros_topic: str, msg_type: type[Message], qos: QoSProfile) -> Topic:
        key = (dds_topic_name(ros_topic, qos), msg_type._type_name_)
        with self._lock:
            if key not in self._topics:
                self._topics[key] = Topic(self._participant, key[0], dds_twin(msg_type))
            return self._topics[key]

    def create_writer(self, topic: str, msg_type: type[Message], qos: QoSProfile) -> DdsWriter:
        dds_topic = self._topic(topic, msg_type, qos)
        endpoint_qos = dds_qos(resolve_qos(qos, writer=True), msg_type._type_hash_)
        writer = DdsWriter(
            DataWriter(self._participant, dds_topic, qos=endpoint_qos), dds_twin(msg_type)
        )
        self._endpoints.append(writer)
        return writer

    def create_reader(
        self, topic: str, msg_type: type[Message], qos: QoSProfile, deliver: Deliver
    ) -> DdsReader:
        dds_topic = self._topic(topic, msg_type, qos)
        endpoint_qos = dds_qos(resolve_qos(qos, writer=False), msg_type._type_hash_)
        reader = DdsReader(self._participant, dds_topic, endpoint_qos, deliver)
        self._endpoints.append(reader)
        return reader

    def close(self) -> None:
        for endpoint in self._endpoints:
            endpoint.close()
        self._endpoints.clear()
        self._topics.clear()
        _delete(self._participant)
