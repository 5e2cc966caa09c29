"""A QoS profile as one endpoint applies it, and the request-versus-offer compatibility rule.

SYSTEM_DEFAULT resolves the way rmw_cyclonedds resolves it (keep-last 1, reliable, volatile);
BEST_AVAILABLE takes the most permissive choice for readers and the strongest for writers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ros_bridge.shim.rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    LivelinessPolicy,
    QoSProfile,
    ReliabilityPolicy,
)


@dataclass(frozen=True)
class EndpointQos:
    reliable: bool
    transient_local: bool
    keep_all: bool
    depth: int  # history depth for KEEP_LAST (>= 1)
    lifespan_ns: int = 0  # 0: unspecified (infinite)
    deadline_ns: int = 0
    manual_liveliness: bool = False
    lease_ns: int = 0


def resolve_qos(qos: QoSProfile, *, writer: bool) -> EndpointQos:
    reliability = qos.reliability
    if reliability == ReliabilityPolicy.BEST_AVAILABLE:
        reliable = writer
    else:
        reliable = reliability != ReliabilityPolicy.BEST_EFFORT
    durability = qos.durability
    if durability == DurabilityPolicy.BEST_AVAILABLE:
        transient_local = writer
    else:
        transient_local = durability == DurabilityPolicy.TRANSIENT_LOCAL
    return EndpointQos(
        reliable=reliable,
        transient_local=transient_local,
        keep_all=qos.history == HistoryPolicy.KEEP_ALL,
        depth=max(qos.depth, 1),
        lifespan_ns=qos.lifespan.nanoseconds,
        deadline_ns=qos.deadline.nanoseconds,
        manual_liveliness=qos.liveliness == LivelinessPolicy.MANUAL_BY_TOPIC,
        lease_ns=qos.liveliness_lease_duration.nanoseconds,
    )


def compatible(offered: EndpointQos, requested: EndpointQos) -> bool:
    """Request versus offer: a reliable reader needs a reliable writer; likewise durability."""
    if requested.reliable and not offered.reliable:
        return False
    return not (requested.transient_local and not offered.transient_local)
