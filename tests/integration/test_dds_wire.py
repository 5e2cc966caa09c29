"""What a ROS 2 peer sees of the shim on DDS, observed with plain `cyclonedds` on loopback.

Checked against rmw_cyclonedds' conventions (reference/dds.md): `rt/` topic names,
`pkg::msg::dds_::Name_` type names, keyless endpoints, XCDR1 only, rmw's QoS mapping, the
`typehash=RIHS01_...;` endpoint user data and `enclave=/;` on the participant. Samples are then
exchanged with an independently declared cyclonedds type, the way a C++ node's would be.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsParticipant,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import make_idl_struct
from cyclonedds.idl.annotations import final
from cyclonedds.idl.types import int32, sequence, uint8, uint32
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from ros_bridge.shim import rclpy
from ros_bridge.shim.rclpy.context import Context
from ros_bridge.shim.rclpy.executors import SingleThreadedExecutor
from ros_bridge.shim.rclpy.node import Node
from ros_bridge.shim.rclpy.qos import qos_profile_sensor_data
from ros_bridge.shim.sensor_msgs.msg import Image
from ros_bridge.shim.transport.dds import LOOPBACK_CONFIG
from tests.support.waiting import wait_until

IMAGE_HASH = "RIHS01_d31d41a9a4c4bc8eae9be757b0beed306564f7526c88ea6a4588fb9582527d47"


# sensor_msgs/Image as a C++ ROS 2 node's type support lays it out (dds.md). Built with
# make_idl_struct because cyclonedds cannot resolve postponed (string) annotations here.
PeerTime = final(
    make_idl_struct(
        "PeerTime", "builtin_interfaces::msg::dds_::Time_", {"sec": int32, "nanosec": uint32}
    )
)
PeerHeader = final(
    make_idl_struct(
        "PeerHeader", "std_msgs::msg::dds_::Header_", {"stamp": PeerTime, "frame_id": str}
    )
)
PeerImage = final(
    make_idl_struct(
        "PeerImage",
        "sensor_msgs::msg::dds_::Image_",
        {
            "header": PeerHeader,
            "height": uint32,
            "width": uint32,
            "encoding": str,
            "is_bigendian": uint8,
            "step": uint32,
            "data": sequence[uint8],
        },
    )
)


ROS_DEFAULT_QOS = Qos(
    Policy.Reliability.Reliable(max_blocking_time=0),
    Policy.History.KeepLast(10),
    Policy.Durability.Volatile,
)


@dataclass
class Shim:
    context: Context
    node: Node
    executor: SingleThreadedExecutor
    observer: DomainParticipant


@pytest.fixture
def shim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Shim]:
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_CONFIG)
    domain = random.randint(1, 200)
    context = Context()
    rclpy.init(context=context, domain_id=domain, transport="dds")
    try:
        node = Node("wire_test", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        yield Shim(context, node, executor, DomainParticipant(domain))
    finally:
        context.try_shutdown()


def _endpoint(observer: DomainParticipant, builtin: Any, topic: str) -> Any:
    reader = BuiltinDataReader(observer, builtin)

    def probe() -> Any:
        return next((s for s in reader.read(N=256) if s.topic_name == topic), None)

    return wait_until(probe, f"discovery of {topic}")


def test_endpoints_follow_ros2_conventions(shim: Shim) -> None:
    shim.node.create_publisher(Image, "camera/image_raw", 10)
    shim.node.create_subscription(
        Image, "camera/image_raw", lambda m: None, qos_profile_sensor_data
    )
    writer = _endpoint(shim.observer, BuiltinTopicDcpsPublication, "rt/camera/image_raw")
    reader = _endpoint(shim.observer, BuiltinTopicDcpsSubscription, "rt/camera/image_raw")
    for endpoint in (writer, reader):
        assert endpoint.type_name == "sensor_msgs::msg::dds_::Image_"
        assert endpoint.qos[Policy.Userdata].data == f"typehash={IMAGE_HASH};".encode()
        representation = endpoint.qos[Policy.DataRepresentation]
        assert representation.use_cdrv0_representation
        assert not representation.use_xcdrv2_representation
        assert endpoint.qos[Policy.Durability] == Policy.Durability.Volatile
    # RTPS entity kinds: 0x03 writer without key, 0x04 reader without key.
    assert (writer.key.bytes[-1], reader.key.bytes[-1]) == (0x03, 0x04)
    assert writer.qos[Policy.History] == Policy.History.KeepLast(10)
    assert isinstance(writer.qos[Policy.Reliability], Policy.Reliability.Reliable)
    assert reader.qos[Policy.History] == Policy.History.KeepLast(5)
    assert reader.qos[Policy.Reliability] == Policy.Reliability.BestEffort
    participants = BuiltinDataReader(shim.observer, BuiltinTopicDcpsParticipant)
    ours = wait_until(
        lambda: [p for p in participants.read(N=64) if p.key == writer.participant_key],
        "the shim's participant",
    )
    assert ours[0].qos[Policy.Userdata].data == b"enclave=/;"


def test_exchange_with_an_independent_dds_peer(shim: Shim) -> None:
    received: list[Image] = []
    shim.node.create_subscription(Image, "/from_peer", received.append, 10)
    to_peer = shim.node.create_publisher(Image, "/to_peer", 10)
    peer_reader = DataReader(
        shim.observer, Topic(shim.observer, "rt/to_peer", PeerImage), qos=ROS_DEFAULT_QOS
    )
    peer_writer = DataWriter(
        shim.observer, Topic(shim.observer, "rt/from_peer", PeerImage), qos=ROS_DEFAULT_QOS
    )
    wait_until(lambda: to_peer.get_subscription_count(), "the peer's reader")
    wait_until(lambda: peer_writer.get_publication_matched_status().current_count, "the shim")

    sent = Image(height=3, width=4, encoding="rgb8", step=12, data=bytes(range(36)))
    sent.header.frame_id = "cam_ü"
    sent.header.stamp.sec, sent.header.stamp.nanosec = 1_700_000_000, 123
    to_peer.publish(sent)
    got = wait_until(lambda: peer_reader.take(N=1), "the peer to receive")[0]
    assert (got.header.stamp.sec, got.header.stamp.nanosec) == (1_700_000_000, 123)
    assert (got.header.frame_id, got.height, got.width) == ("cam_ü", 3, 4)
    assert (got.encoding, got.step, bytes(got.data)) == ("rgb8", 12, bytes(range(36)))

    peer_writer.write(
        PeerImage(
            header=PeerHeader(stamp=PeerTime(sec=5, nanosec=6), frame_id="peer"),
            height=1,
            width=2,
            encoding="mono8",
            is_bigendian=0,
            step=2,
            data=[7, 8],
        )
    )

    def spin_until_received() -> bool:
        shim.executor.spin_once(timeout_sec=0.1)
        return bool(received)

    wait_until(spin_until_received, "the shim to receive")
    msg = received[0]
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id) == (5, 6, "peer")
    assert (msg.height, msg.width, msg.encoding, msg.step) == (1, 2, "mono8", 2)
    assert msg.data.tobytes() == b"\x07\x08"
