"""Transports that carry the shim's samples: `inproc` (one process) and `dds` (ROS 2 wire)."""

from __future__ import annotations

import os

from ros_bridge.shim.transport.base import (
    Deliver,
    Reader,
    ServiceClient,
    ServiceServer,
    Transport,
    Writer,
)

TRANSPORT_ENV = "VLA_SHIM_TRANSPORT"
TRANSPORTS = ("inproc", "dds")

__all__ = [
    "TRANSPORTS",
    "TRANSPORT_ENV",
    "Deliver",
    "Reader",
    "ServiceClient",
    "ServiceServer",
    "Transport",
    "Writer",
    "create_transport",
]


def create_transport(name: str | None, domain_id: int) -> Transport:
    """The transport `name`, else $VLA_SHIM_TRANSPORT, else in-process."""
    name = name or os.environ.get(TRANSPORT_ENV) or "inproc"
    if name == "inproc":
        from ros_bridge.shim.transport.inproc import InprocTransport

        return InprocTransport(domain_id)
    if name == "dds":
        # Imported here so that in-process use never loads the Cyclone library.
        from ros_bridge.shim.transport.dds import DdsTransport

        return DdsTransport(domain_id)
    raise ValueError(f"unknown shim transport {name!r}; choose one of {TRANSPORTS}")
