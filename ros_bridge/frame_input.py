"""Camera frames to request images: validation, RGB pixels, the edge hash, `image_data` (ROS-free).

The hash is the server's own function (`vla_server.multimodal.image_hash`) over the pixels the
server itself will decode from what we send: compressed frames are decoded with the server's
decoder (`decode_encoded_image`) and sent as the original encoded bytes; raw frames are converted
to RGB here and sent as raw pixels, which the server hashes unchanged. So the bridge's
`mm_hashes` equal the hashes the server would compute, and a repeated frame hits its caches.

Bad frames raise `BadFrame` with a reason the node reports as a WARN diagnostic: an unsupported
`encoding`, zero size, `step * height != len(data)`, a `step` too short for the width, or
compressed data that does not decode.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from ros_bridge.camera_frame import CameraFrame
from vla_server.multimodal.image_decode import array_to_rgb, decode_encoded_image
from vla_server.multimodal.image_errors import ImageInputError
from vla_server.multimodal.image_hash import format_mm_hash, image_hash

MAX_PIXELS = 4096 * 4096  # the server's default --max-image-pixels
# sensor_msgs/image_encodings with 8-bit channels -> (channels, order to RGB(A))
RAW_ENCODINGS: dict[str, tuple[int, tuple[int, ...] | None]] = {
    "rgb8": (3, None),
    "bgr8": (3, (2, 1, 0)),
    "rgba8": (4, None),
    "bgra8": (4, (2, 1, 0, 3)),
    "mono8": (1, None),
    "8UC1": (1, None),
    "8UC3": (3, (2, 1, 0)),  # OpenCV's default channel order is BGR
}


class BadFrame(ValueError):
    """A camera message that cannot become a request image; the message says why."""


@dataclass(frozen=True)
class PreparedImage:
    """One camera image ready for a request."""

    pixels: np.ndarray  # RGB uint8 [H, W, 3], exactly what the server will decode
    image_data: Any  # JSON value for the request's `image_data`
    digest: bytes | None  # the preprocess digest `mm_hash` was computed under
    mm_hash: str | None  # 32 hex digits; None until the server's digest is known

    def with_digest(self, digest: bytes | None) -> PreparedImage:
        """This image hashed under `digest` (reuses the hash when the digest is unchanged)."""
        if digest == self.digest:
            return self
        mm_hash = None if digest is None else format_mm_hash(image_hash(self.pixels, digest))
        return PreparedImage(self.pixels, self.image_data, digest, mm_hash)


def prepare_image(frame: CameraFrame, digest: bytes | None) -> PreparedImage:
    """Validates and decodes `frame`, hashes it under `digest`; raises BadFrame."""
    if frame.compressed:
        pixels = decode_compressed(frame.data)
        image_data: Any = base64.b64encode(frame.data).decode("ascii")
    else:
        pixels = raw_to_rgb(frame)
        image_data = {
            "shape": list(pixels.shape),
            "dtype": "uint8",
            "data": base64.b64encode(pixels.data).decode("ascii"),
        }
    return PreparedImage(pixels, image_data, None, None).with_digest(digest)


def decode_compressed(data: bytes) -> np.ndarray:
    if not data:
        raise BadFrame("compressed image has no data")
    try:
        return decode_encoded_image(data, MAX_PIXELS)
    except ImageInputError as exc:
        raise BadFrame(f"undecodable compressed image: {exc}") from None


def raw_to_rgb(frame: CameraFrame) -> np.ndarray:
    """RGB uint8 [H, W, 3] of a sensor_msgs/Image; row padding (`step`) is removed."""
    if frame.encoding not in RAW_ENCODINGS:
        raise BadFrame(
            f"unsupported encoding {frame.encoding!r} (supported: {', '.join(RAW_ENCODINGS)})"
        )
    channels, order = RAW_ENCODINGS[frame.encoding]
    height, width, step = frame.height, frame.width, frame.step
    if height == 0 or width == 0 or not frame.data:
        raise BadFrame(f"empty image ({width}x{height}, {len(frame.data)} bytes)")
    if step * height != len(frame.data):
        raise BadFrame(f"step*height = {step}*{height} != len(data) = {len(frame.data)}")
    if step < width * channels:
        raise BadFrame(f"step {step} < width*channels = {width}*{channels}")
    if width * height > MAX_PIXELS:
        raise BadFrame(f"{width}x{height} is over the limit of {MAX_PIXELS} pixels")
    rows = np.frombuffer(frame.data, dtype=np.uint8).reshape(height, step)
    pixels = rows[:, : width * channels].reshape(height, width, channels)
    if order is not None:
        pixels = pixels[:, :, order]
    return array_to_rgb(np.ascontiguousarray(pixels))
