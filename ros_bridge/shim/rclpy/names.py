"""ROS 2 name rules: node names, namespaces, topic expansion (`~`, relative) and remapping."""

from __future__ import annotations

import re

from ros_bridge.shim.rclpy.arguments import Remap
from ros_bridge.shim.rclpy.exceptions import (
    InvalidNamespaceException,
    InvalidNodeNameException,
    InvalidTopicNameException,
)

_NODE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = r"[A-Za-z_][A-Za-z0-9_]*"
_FQ_NAME = re.compile(rf"(/{_TOKEN})+")


def validate_node_name(name: str) -> str:
    if not _NODE_NAME.fullmatch(name):
        raise InvalidNodeNameException(f"node name {name!r} is invalid: use [A-Za-z_][A-Za-z0-9_]*")
    return name


def normalize_namespace(namespace: str | None) -> str:
    """A node namespace: absolute, no trailing slash; '' and None mean '/'."""
    if not namespace:
        return "/"
    if not namespace.startswith("/"):
        namespace = "/" + namespace
    if namespace != "/" and not _FQ_NAME.fullmatch(namespace):
        raise InvalidNamespaceException(f"namespace {namespace!r} is invalid")
    return namespace


def fully_qualified_node_name(node_name: str, namespace: str) -> str:
    return f"{namespace.rstrip('/')}/{node_name}"


def expand_topic_name(topic: str, node_name: str, namespace: str) -> str:
    """`topic` made absolute: '~' is the node's own name, relative names join the namespace."""
    if not topic:
        raise InvalidTopicNameException("topic name must not be empty")
    fq_node = fully_qualified_node_name(node_name, namespace)
    expanded = topic.replace("{node}", node_name).replace("{ns}", namespace)
    expanded = expanded.replace("{namespace}", namespace)
    if expanded == "~" or expanded.startswith("~/"):
        expanded = fq_node + expanded[1:]
    elif not expanded.startswith("/"):
        expanded = f"{namespace.rstrip('/')}/{expanded}"
    if not _FQ_NAME.fullmatch(expanded):
        raise InvalidTopicNameException(f"topic name {topic!r} is invalid (expanded: {expanded!r})")
    return expanded


def remap_topic_name(fq_topic: str, remaps: list[Remap], node_name: str, namespace: str) -> str:
    """The target of the first remap rule whose source names `fq_topic` (rcl: first match wins)."""
    for rule in remaps:
        if rule.source.startswith("__"):
            continue
        if expand_topic_name(rule.source, node_name, namespace) == fq_topic:
            return expand_topic_name(rule.target, node_name, namespace)
    return fq_topic
