"""The graph half of rclpy's Node: who else is in the domain, and on which topics and services.

Answers come from the transport's graph cache (over DDS: discovery plus `ros_discovery_info`, so
real ROS 2 nodes appear with their endpoints), with rclpy's names and shapes.
"""

from __future__ import annotations

from typing import Any

from ros_bridge.shim.graph import GraphCache, names_and_types, wire_name
from ros_bridge.shim.rclpy.names import fully_qualified_node_name


class NodeGraph:
    """Mixed into Node, which provides `_graph()` and `resolve_topic_name`."""

    def _graph(self) -> GraphCache:
        raise NotImplementedError

    resolve_topic_name: Any

    def get_node_names(self) -> list[str]:
        return [name for name, _ in self._graph().node_names()]

    def get_node_names_and_namespaces(self) -> list[tuple[str, str]]:
        return self._graph().node_names()

    def get_fully_qualified_node_names(self) -> list[str]:
        return [fully_qualified_node_name(n, ns) for n, ns in self._graph().node_names()]

    def count_publishers(self, topic_name: str) -> int:
        """Writers on the topic anywhere in the domain (this node's own included)."""
        return self._count(topic_name, is_reader=False)

    def count_subscribers(self, topic_name: str) -> int:
        return self._count(topic_name, is_reader=True)

    def _count(self, topic_name: str, *, is_reader: bool) -> int:
        wire = wire_name(self.resolve_topic_name(topic_name), False)
        return len(self._graph().endpoints(wire, is_reader=is_reader))

    def get_topic_names_and_types(self, no_demangle: bool = False) -> list[tuple[str, list[str]]]:
        return names_and_types(self._graph().all_endpoints(), ("topic",))

    def get_service_names_and_types(self) -> list[tuple[str, list[str]]]:
        return names_and_types(self._graph().all_endpoints(), ("request", "reply"))

    def get_publisher_names_and_types_by_node(
        self, node_name: str, node_namespace: str, no_demangle: bool = False
    ) -> list[tuple[str, list[str]]]:
        return self._by_node(node_name, node_namespace, "topic", is_reader=False)

    def get_subscriber_names_and_types_by_node(
        self, node_name: str, node_namespace: str, no_demangle: bool = False
    ) -> list[tuple[str, list[str]]]:
        return self._by_node(node_name, node_namespace, "topic", is_reader=True)

    def get_service_names_and_types_by_node(
        self, node_name: str, node_namespace: str
    ) -> list[tuple[str, list[str]]]:
        # a service is known by its request reader (a client's is a reply reader), as in rmw
        return self._by_node(node_name, node_namespace, "request", is_reader=True)

    def _by_node(
        self, name: str, namespace: str, kind: str, *, is_reader: bool
    ) -> list[tuple[str, list[str]]]:
        endpoints = self._graph().node_endpoints(name, namespace, is_reader=is_reader)
        return names_and_types(endpoints, (kind,))
