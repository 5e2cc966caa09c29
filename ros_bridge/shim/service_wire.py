"""How rmw_cyclonedds frames a service's requests and replies on their DDS topics.

A request is the request message's CDR sample with a 16-byte header between the encapsulation
and the fields: `uint64 guid` (the client's id: its request writer's instance handle) and `int64
seq` (the client's request number). The service sends the same header back in front of the reply,
and each client keeps only the replies carrying its own id. The header is 8-aligned, so the fields
after it keep the alignment they have in the bare message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ros_bridge.shim.cdr import CdrError

_HEADER = {"<": struct.Struct("<Qq"), ">": struct.Struct(">Qq")}
_ENCAPSULATION = 4


@dataclass(frozen=True)
class RequestHeader:
    guid: int  # the client's id
    seq: int  # its request number


def frame(header: RequestHeader, sample: bytes) -> bytes:
    """`sample` (a little-endian CDR message, as `serialize_message` makes it) with `header`."""
    packed = _HEADER["<"].pack(header.guid, header.seq)
    return sample[:_ENCAPSULATION] + packed + sample[_ENCAPSULATION:]


def unframe(data: bytes) -> tuple[RequestHeader, bytes]:
    """The header and the bare message sample of a framed request or reply."""
    if len(data) < _ENCAPSULATION + _HEADER["<"].size or data[1] not in (0, 1):
        raise CdrError(f"not a framed service sample ({bytes(data[:4]).hex()})")
    order = "<" if data[1] == 1 else ">"
    end = _ENCAPSULATION + _HEADER[order].size
    guid, seq = _HEADER[order].unpack(data[_ENCAPSULATION:end])
    return RequestHeader(guid, seq), bytes(data[:_ENCAPSULATION]) + bytes(data[end:])
