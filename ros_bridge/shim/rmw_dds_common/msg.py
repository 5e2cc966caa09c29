"""rmw_dds_common/msg: what a DDS participant publishes on `ros_discovery_info` so that every other
participant knows which ROS 2 nodes it hosts and which readers and writers belong to each."""

from __future__ import annotations

from ros_bridge.shim.fields import bounded_string, fixed_array, seq
from ros_bridge.shim.message import Message

GID_SIZE = 16  # a DDS GUID: 12-byte prefix, 4-byte entity id


class Gid(Message):
    _type_name_ = "rmw_dds_common/msg/Gid"
    _type_hash_ = "RIHS01_ab6f21cfbb0a6dbb837161e1110c2051a2850ed9f9c53944d7115d9bcebedf71"
    _fields_ = (("data", fixed_array("char", GID_SIZE)),)


class NodeEntitiesInfo(Message):
    _type_name_ = "rmw_dds_common/msg/NodeEntitiesInfo"
    _type_hash_ = "RIHS01_8ffef65ee2d088c63b1e8fcd31e800ba9fc8dbe0ee15ca60d1676de5218087a7"
    _fields_ = (
        ("node_namespace", bounded_string(256)),
        ("node_name", bounded_string(256)),
        ("reader_gid_seq", seq(Gid)),
        ("writer_gid_seq", seq(Gid)),
    )


class ParticipantEntitiesInfo(Message):
    _type_name_ = "rmw_dds_common/msg/ParticipantEntitiesInfo"
    _type_hash_ = "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e"
    _fields_ = (("gid", Gid), ("node_entities_info_seq", seq(NodeEntitiesInfo)))
