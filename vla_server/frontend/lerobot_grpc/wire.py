"""LeRobot's `transport.AsyncInference` messages, encoded and decoded by hand.

The service's four messages are tiny (LeRobot's `transport/services.proto`):

    enum TransferState { TRANSFER_UNKNOWN = 0; TRANSFER_BEGIN = 1; TRANSFER_MIDDLE = 2;
                         TRANSFER_END = 3; }
    message Observation { TransferState transfer_state = 1; bytes data = 2; }
    message Actions { bytes data = 1; }
    message PolicySetup { bytes data = 1; }
    message Empty {}

so the node reads and writes their protobuf wire form here rather than shipping generated code
and a protobuf runtime: gRPC hands the handlers raw bytes, and a malformed message becomes an
error naming the field. Decoding follows proto3: unknown fields are skipped, a repeated scalar
field keeps its last value, an absent one is its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from vla_server.errors import RequestError

SERVICE = "transport.AsyncInference"
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class TransferState(IntEnum):
    TRANSFER_UNKNOWN = 0
    TRANSFER_BEGIN = 1
    TRANSFER_MIDDLE = 2
    TRANSFER_END = 3


@dataclass(frozen=True)
class Observation:
    transfer_state: int
    data: bytes


def _varint(buf: bytes, pos: int, message: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise RequestError("truncated or overlong varint", message)
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _fields(buf: bytes, message: str) -> dict[int, int | bytes]:
    """Each field number's last value (proto3: the last one wins), unknown ones included."""
    out: dict[int, int | bytes] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, message)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise RequestError("field number 0 is invalid", message)
        if wire == _VARINT:
            out[number], pos = _varint(buf, pos, message)
        elif wire in (_FIXED64, _FIXED32):
            pos += 8 if wire == _FIXED64 else 4
            if pos > len(buf):
                raise RequestError("truncated fixed-width field", message)
        elif wire == _LENGTH:
            size, pos = _varint(buf, pos, message)
            if pos + size > len(buf):
                raise RequestError(f"field {number} is truncated", message)
            out[number], pos = buf[pos : pos + size], pos + size
        else:
            raise RequestError(f"unsupported wire type {wire}", message)
    return out


def _typed(fields: dict[int, int | bytes], number: int, kind: type, field: str) -> int | bytes:
    value = fields.get(number, kind())
    if not isinstance(value, kind):
        raise RequestError(f"has the wrong wire type (expected {kind.__name__})", field)
    return value


def decode_observation(buf: bytes) -> Observation:
    fields = _fields(buf, "Observation")
    state = _typed(fields, 1, int, "Observation.transfer_state")
    data = _typed(fields, 2, bytes, "Observation.data")
    assert isinstance(state, int) and isinstance(data, bytes)
    return Observation(state, data)


def decode_data(buf: bytes, message: str) -> bytes:
    """The `data` field of an `Actions` or `PolicySetup` message."""
    data = _typed(_fields(buf, message), 1, bytes, f"{message}.data")
    assert isinstance(data, bytes)
    return data


def decode_empty(buf: bytes) -> None:
    _fields(buf, "Empty")  # any fields are unknown ones: skipped, but the bytes must parse


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _encode_bytes(number: int, data: bytes) -> bytes:
    if not data:
        return b""  # proto3 leaves a default out
    return _encode_varint(number << 3 | _LENGTH) + _encode_varint(len(data)) + data


def encode_observation(state: int, data: bytes) -> bytes:
    head = _encode_varint(1 << 3 | _VARINT) + _encode_varint(state) if state else b""
    return head + _encode_bytes(2, data)


def encode_data(data: bytes) -> bytes:
    """An `Actions` or `PolicySetup` message; empty bytes are the `Empty` message too."""
    return _encode_bytes(1, data)


class Reassembler:
    """LeRobot's `receive_bytes_in_chunks` for one payload: BEGIN starts it, MIDDLE appends,
    END appends and completes it; a single-chunk payload is one END. Stricter than LeRobot in
    what it refuses (with the field named): a MIDDLE before any BEGIN, an unknown state, and
    a payload over `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.started = False

    def feed(self, message: Observation) -> bytes | None:
        """The whole payload once `message` completes it, else None."""
        state = message.transfer_state
        if state not in (TransferState.TRANSFER_BEGIN, TransferState.TRANSFER_MIDDLE,
                         TransferState.TRANSFER_END):  # fmt: skip
            raise RequestError(f"unknown transfer state {state}", "Observation.transfer_state")
        if state == TransferState.TRANSFER_BEGIN:
            self.parts, self.size, self.started = [], 0, True
        elif state == TransferState.TRANSFER_MIDDLE and not self.started:
            raise RequestError(
                "TRANSFER_MIDDLE before TRANSFER_BEGIN", "Observation.transfer_state"
            )
        self.size += len(message.data)
        if self.size > self.max_bytes:
            raise RequestError(f"payload exceeds {self.max_bytes} bytes", "Observation.data")
        self.parts.append(message.data)
        if state != TransferState.TRANSFER_END:
            return None
        payload = b"".join(self.parts)
        self.parts, self.size, self.started = [], 0, False
        return payload
