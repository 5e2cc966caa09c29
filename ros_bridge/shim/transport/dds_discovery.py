"""The ROS 2 graph over DDS: discovery's built-in topics plus rmw's `ros_discovery_info`.

Cyclone's built-in readers report every participant, reader and writer of the domain (ours too);
`ros_discovery_info` carries each participant's `ParticipantEntitiesInfo` (its nodes and their
endpoints' GIDs), published as rmw_cyclonedds publishes it: on that bare topic name, reliable,
transient local, keep-last 1, re-sent whole whenever a node or an endpoint comes or goes. The
reader keeps all samples and skips our own, as rmw's does.
"""

from __future__ import annotations

import contextlib
from typing import Any

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsParticipant,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import InstanceState
from cyclonedds.domain import DomainParticipant

from ros_bridge.shim.cdr import deserialize_message, serialize_message
from ros_bridge.shim.graph import Endpoint, GraphCache, NodeEntities, nodes_of, participant_info
from ros_bridge.shim.rclpy.exceptions import RCLError
from ros_bridge.shim.rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
)
from ros_bridge.shim.rmw_dds_common.msg import ParticipantEntitiesInfo
from ros_bridge.shim.transport.dds_receiver import Receiver
from ros_bridge.shim.transport.dds_types import delete_entity

DISCOVERY_TOPIC = "ros_discovery_info"
_RELIABLE, _LOCAL = ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL
WRITER_QOS = QoSProfile(
    depth=1, reliability=_RELIABLE, durability=_LOCAL, avoid_ros_namespace_conventions=True
)
READER_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_ALL,
    reliability=_RELIABLE,
    durability=_LOCAL,
    avoid_ros_namespace_conventions=True,
)


class DdsDiscovery:
    """Keeps `graph` up to date; `publish(nodes)` announces this participant's nodes."""

    def __init__(
        self, transport: Any, participant: DomainParticipant, receiver: Receiver, graph: GraphCache
    ) -> None:
        self._gid = participant.guid.bytes
        self._graph = graph
        self._receiver = receiver
        self._builtin = []
        for topic, handle in (
            (BuiltinTopicDcpsParticipant, self._on_participant),
            (BuiltinTopicDcpsPublication, lambda s: self._on_endpoint(s, is_reader=False)),
            (BuiltinTopicDcpsSubscription, lambda s: self._on_endpoint(s, is_reader=True)),
        ):
            reader = BuiltinDataReader(participant, topic)
            receiver.add(reader, handle, "discovery updates")
            self._builtin.append(reader)
        info = ParticipantEntitiesInfo
        self._writer = transport.create_writer(DISCOVERY_TOPIC, info, WRITER_QOS)
        self._reader = transport.create_reader(DISCOVERY_TOPIC, info, READER_QOS, self._on_info)

    def publish(self, nodes: list[NodeEntities]) -> None:
        self._graph.update_participant(self._gid, nodes)
        with contextlib.suppress(RCLError):  # a node destroyed after its context shut down
            self._writer.write(serialize_message(participant_info(self._gid, nodes)))

    def _on_info(self, payload: bytes) -> None:
        info = deserialize_message(payload, ParticipantEntitiesInfo)
        gid = info.gid.data.tobytes()
        if gid != self._gid:  # our own nodes are known without the network
            self._graph.update_participant(gid, nodes_of(info))

    def _on_participant(self, sample: Any) -> None:
        if sample.sample_info.instance_state != InstanceState.Alive:
            self._graph.remove_participant(sample.key.bytes)

    def _on_endpoint(self, sample: Any, *, is_reader: bool) -> None:
        gid = sample.key.bytes
        if sample.sample_info.instance_state != InstanceState.Alive:
            self._graph.remove_endpoint(gid)
        elif sample.sample_info.valid_data and not sample.topic_name.startswith("DCPS"):
            participant = sample.participant_key.bytes
            endpoint = Endpoint(gid, sample.topic_name, sample.type_name, participant, is_reader)
            self._graph.add_endpoint(endpoint)

    def close(self) -> None:
        for reader in self._builtin:
            self._receiver.remove(reader)
            delete_entity(reader)
        self._builtin.clear()
