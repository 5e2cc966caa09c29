"""Read the width and height a PNG or JPEG *declares*, from its header bytes alone.

This runs before PIL sees the data, so a file whose header claims 100000x100000 pixels is
rejected without allocating anything and without tripping PIL's own decompression-bomb
warning (PIL's check is process-global state we must not depend on or change).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from vla_frames.image_errors import ImageInputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"
# Start-of-frame markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone, without a length field.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_JPEG_SOS = 0xDA


@dataclass(frozen=True)
class DeclaredSize:
    format: str  # "PNG" or "JPEG", as PIL names them
    width: int
    height: int


def sniff_format(data: bytes) -> str:
    if data.startswith(PNG_SIGNATURE):
        return "PNG"
    if data.startswith(JPEG_SOI):
        return "JPEG"
    if not data:
        raise ImageInputError("empty image")
    raise ImageInputError("unrecognised image format (expected PNG or JPEG)")


def read_declared_size(data: bytes) -> DeclaredSize:
    fmt = sniff_format(data)
    width, height = _png_size(data) if fmt == "PNG" else _jpeg_size(data)
    if width <= 0 or height <= 0:
        raise ImageInputError(f"{fmt} header declares an empty image ({width}x{height})")
    return DeclaredSize(fmt, width, height)


def _png_size(data: bytes) -> tuple[int, int]:
    # signature(8) | length(4) | b"IHDR" | width(4) | height(4)
    if len(data) < 24:
        raise ImageInputError("truncated PNG (no complete IHDR header)")
    if data[12:16] != b"IHDR":
        raise ImageInputError("corrupt PNG (first chunk is not IHDR)")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    pos = 2
    while True:
        if pos < len(data) and data[pos] != 0xFF:
            raise _truncated_or_corrupt_jpeg(False)
        while pos < len(data) and data[pos] == 0xFF:  # a marker, maybe after fill bytes
            pos += 1
        if pos >= len(data):
            raise _truncated_or_corrupt_jpeg(True)
        marker, pos = data[pos], pos + 1
        if marker in _JPEG_STANDALONE:
            continue
        if pos + 2 > len(data):
            raise _truncated_or_corrupt_jpeg(True)
        (length,) = struct.unpack(">H", data[pos : pos + 2])
        if marker in _JPEG_SOF:
            if pos + 7 > len(data):
                raise _truncated_or_corrupt_jpeg(True)
            height, width = struct.unpack(">HH", data[pos + 3 : pos + 7])
            return width, height
        if marker == _JPEG_SOS or length < 2:
            raise ImageInputError("corrupt JPEG (no frame header before the image data)")
        pos += length


def _truncated_or_corrupt_jpeg(truncated: bool) -> ImageInputError:
    if truncated:
        return ImageInputError("truncated JPEG (header ends before the frame size)")
    return ImageInputError("corrupt JPEG (bad marker in header)")
