"""Child process of the graph tests: a ROS 2 node as rmw_cyclonedds makes one, without the shim.

Run as `python -m tests.support.ros2_peer --domain D`. It is node `/ros2_peer` of its own
participant (`enclave=/;`, its nodes announced on `ros_discovery_info`), reads the graph, /rosout,
/parameter_events and /diagnostics, and calls parameter services the way rclpy's clients do
(a `clientid=` in USER_DATA, the request header `guid, seq`, replies taken by their guid). Types
are `ros2_peer_types`. It answers one JSON command per stdin line with one JSON line on stdout:

  {"cmd": "graph"}                               -> {"nodes": [{"name", "namespace", "readers",
                                                     "writers"}]}  (endpoints as DDS topics)
  {"cmd": "set", "node", "name", "value": {...}} -> {"successful", "reason"}
  {"cmd": "get", "node", "name"}                 -> {"value": {...}} (the ParameterValue's fields)
  {"cmd": "join_rosout"}                         -> {"joined_ns"}: subscribes to /rosout now
  {"cmd": "rosout"} / {"cmd": "events"}          -> {"items": [...]} what arrived so far
  {"cmd": "diagnostics"}                         -> {"status": {name: {"level", "values"}}}
  {"cmd": "quit"}
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from tests.support import ros2_peer_types as T
from tests.support.waiting import wait_until

NODE = "ros2_peer"


def qos(depth: int | None, *, local: bool = False, user_data: bytes = b"") -> Qos:
    """rmw_cyclonedds' QoS: reliable, keep-last `depth` (None: keep all), volatile or local."""
    policies: list[Any] = [
        Policy.Reliability.Reliable(max_blocking_time=0),
        Policy.History.KeepAll if depth is None else Policy.History.KeepLast(depth),
        Policy.Durability.TransientLocal if local else Policy.Durability.Volatile,
    ]
    if user_data:
        policies.append(Policy.Userdata(data=user_data))
    return Qos(*policies)


def plain(sample: Any) -> Any:
    """An IdlStruct as JSON-able dicts and lists."""
    if hasattr(sample, "__dataclass_fields__"):
        return {k: plain(getattr(sample, k)) for k in sample.__dataclass_fields__}
    if isinstance(sample, list | tuple):
        return [plain(v) for v in sample]
    if isinstance(sample, bytes):
        return sample[0] if len(sample) == 1 else list(sample)
    return sample


class Collector:
    """Everything a reader has received, taken when asked: the peer runs on one thread and uses
    no listener (a listener runs Python on Cyclone's threads, which can deadlock with a write)."""

    def __init__(self, participant: DomainParticipant, topic: str, kind: Any, reader_qos: Qos):
        self.items: list[Any] = []
        self.reader = DataReader(participant, Topic(participant, topic, kind), qos=reader_qos)

    def snapshot(self) -> list[Any]:
        while samples := self.reader.take(N=256):
            self.items.extend(samples)
        return list(self.items)


class Peer:
    def __init__(self, domain: int) -> None:
        self.participant = DomainParticipant(domain, qos=Qos(Policy.Userdata(data=b"enclave=/;")))
        self.gid = self.participant.guid.bytes
        self.endpoints = {
            kind: BuiltinDataReader(self.participant, kind)
            for kind in (BuiltinTopicDcpsPublication, BuiltinTopicDcpsSubscription)
        }
        self.topics: dict[bytes, str] = {}  # endpoint GID -> DDS topic name
        self.infos = Collector(
            self.participant, "ros_discovery_info", T.ParticipantEntitiesInfo, qos(None, local=True)
        )
        self.info_writer = DataWriter(
            self.participant,
            Topic(self.participant, "ros_discovery_info", T.ParticipantEntitiesInfo),
            qos=qos(1, local=True),
        )
        self.events = Collector(
            self.participant, "rt/parameter_events", T.ParameterEvent, qos(1000)
        )
        self.diagnostics = Collector(self.participant, "rt/diagnostics", T.DiagnosticArray, qos(10))
        self.rosout: Collector | None = None
        # the node's own readers (rmw leaves the ros_discovery_info endpoints out)
        self.readers = [c.reader.guid.bytes for c in (self.events, self.diagnostics)]
        self.client_ids = itertools.count(1)
        self.announce()

    def announce(self) -> None:
        """This participant's node and its endpoints, as rmw publishes them."""
        node = T.NodeEntitiesInfo(
            node_namespace="/",
            node_name=NODE,
            reader_gid_seq=[T.Gid(data=list(g)) for g in self.readers],
            writer_gid_seq=[],
        )
        gid = T.Gid(data=list(self.gid))
        self.info_writer.write(T.ParticipantEntitiesInfo(gid=gid, node_entities_info_seq=[node]))

    def graph(self) -> dict[str, Any]:
        for builtin in self.endpoints.values():
            for sample in builtin.read(N=1024):
                if sample.topic_name is not None:
                    self.topics[sample.key.bytes] = sample.topic_name
        latest: dict[bytes, Any] = {}
        for info in self.infos.snapshot():  # the newest sample of each participant counts
            latest[bytes(info.gid.data)] = info
        nodes = []
        for info in latest.values():
            for node in info.node_entities_info_seq:
                nodes.append(
                    {
                        "name": node.node_name,
                        "namespace": node.node_namespace,
                        "readers": sorted(self._names(node.reader_gid_seq)),
                        "writers": sorted(self._names(node.writer_gid_seq)),
                    }
                )
        return {"nodes": nodes}

    def _names(self, gids: list[Any]) -> list[str]:
        return [self.topics.get(bytes(g.data), "?") for g in gids]

    def call(self, service: str, request_type: Any, reply_type: Any, **fields: Any) -> Any:
        """One request to `service` and its reply (rclpy's client, over rmw_cyclonedds)."""
        client = f"peer.{next(self.client_ids)}".encode()
        data = b"clientid=" + client + b";"
        writer = DataWriter(
            self.participant,
            Topic(self.participant, f"rq{service}Request", request_type),
            qos=qos(1000, user_data=data),
        )
        reply_qos = qos(1000, user_data=data)
        replies = Collector(self.participant, f"rr{service}Reply", reply_type, reply_qos)
        try:
            wait_until(lambda: writer.get_publication_matched_status().current_count, service)
            wait_until(
                lambda: replies.reader.get_subscription_matched_status().current_count, service
            )
            guid = writer.instance_handle % 2**64  # rmw's client id: the writer's handle
            writer.write(request_type(guid=guid, seq=1, **fields))
            return wait_until(
                lambda: [r for r in replies.snapshot() if (r.guid, r.seq) == (guid, 1)],
                f"a reply from {service}",
            )[0]
        finally:
            writer.__del__()
            replies.reader.__del__()

    def set(self, node: str, name: str, value: dict[str, Any]) -> dict[str, Any]:
        parameter = T.Parameter(name=name, value=T.ParameterValue(**_value_fields(value)))
        reply = self.call(
            f"{node}/set_parameters",
            T.SetParametersRequest,
            T.SetParametersResponse,
            parameters=[parameter],
        )
        return plain(reply.results[0])

    def get(self, node: str, name: str) -> dict[str, Any]:
        reply = self.call(
            f"{node}/get_parameters", T.GetParametersRequest, T.GetParametersResponse, names=[name]
        )
        return {"value": plain(reply.values[0]) if reply.values else None}

    def join_rosout(self) -> dict[str, Any]:
        joined = time.time_ns()
        self.rosout = Collector(self.participant, "rt/rosout", T.Log, qos(1000, local=True))
        self.readers.append(self.rosout.reader.guid.bytes)
        self.announce()
        return {"joined_ns": joined}

    def latest_diagnostics(self) -> dict[str, Any]:
        arrays = self.diagnostics.snapshot()
        status = arrays[-1].status if arrays else []
        return {
            "status": {
                s.name: {"level": plain(s.level), "values": {kv.key: kv.value for kv in s.values}}
                for s in status
            }
        }

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        cmd = command.pop("cmd")
        handlers: dict[str, Callable[..., dict[str, Any]]] = {
            "graph": self.graph,
            "set": self.set,
            "get": self.get,
            "join_rosout": self.join_rosout,
            "rosout": lambda: {"items": plain(self.rosout.snapshot() if self.rosout else [])},
            "events": lambda: {"items": plain(self.events.snapshot())},
            "diagnostics": self.latest_diagnostics,
        }
        if cmd not in handlers:
            raise ValueError(f"unknown command {cmd!r}")
        return handlers[cmd](**command)


def _value_fields(given: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "type": 0,
        "bool_value": False,
        "integer_value": 0,
        "double_value": 0.0,
        "string_value": "",
        "byte_array_value": [],
        "bool_array_value": [],
        "integer_array_value": [],
        "double_array_value": [],
        "string_array_value": [],
    }
    return fields | given


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--domain", type=int, required=True)
    args = parser.parse_args()
    peer = Peer(args.domain)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        try:
            answer = peer.handle(command)
        except (TimeoutError, ValueError, TypeError) as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    peer.participant.__del__()
    return 0


if __name__ == "__main__":
    sys.exit(main())
