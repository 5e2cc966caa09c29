"""Camera frames to request images: validation, RGB pixels, the edge hash, `image_data` (ROS-free).

Raw frames are converted to RGB here and sent as raw pixels, with the server's own hash
(`vla_frames.image_hash`) over them as `mm_hashes`: the server uses it as given.
Compressed frames travel as their original bytes, checked only up to their header (format,
declared size): the server has to decode them anyway, and decoding them here too, only to hash
them, cost a full JPEG decode (1.4 ms at 640x480) on every frame's path. The server hashes what
it decodes, so a repeated frame hits its caches either way.

Bad frames raise `BadFrame` with a reason the node reports as a WARN diagnostic: an unsupported
`encoding`, zero size, `step * height != len(data)`, a `step` too short for the width, or
compressed data that is not a PNG/JPEG or declares too many pixels. A compressed body that is
corrupt past its header is refused by the server (HTTP 400, reported like any failed request).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from ros_bridge.camera_frame import CameraFrame
from vla_frames.image_decode import array_to_rgb, check_pixel_count
from vla_frames.image_errors import ImageInputError
from vla_frames.image_hash import format_mm_hash, image_hash
from vla_frames.image_header import read_declared_size

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

    pixels: np.ndarray | None  # RGB uint8 [H, W, 3] as the server reads it; None: compressed
    image_data: Any  # JSON value for the request's `image_data`
    digest: bytes | None  # the preprocess digest `mm_hash` was computed under
    mm_hash: str | None  # 32 hex digits; None until the server's digest is known, or compressed

    def with_digest(self, digest: bytes | None) -> PreparedImage:
        """This image hashed under `digest` (reuses the hash when the digest is unchanged)."""
        if digest == self.digest or self.pixels is None:
            return self
        mm_hash = None if digest is None else format_mm_hash(image_hash(self.pixels, digest))
        return PreparedImage(self.pixels, self.image_data, digest, mm_hash)


def prepare_image(frame: CameraFrame, digest: bytes | None) -> PreparedImage:
    """Validates `frame` (raw: converts and hashes it under `digest`); raises BadFrame."""
    if frame.compressed:
        check_compressed(frame.data)
        return PreparedImage(None, base64.b64encode(frame.data).decode("ascii"), None, None)
    pixels = raw_to_rgb(frame)
    image_data = {
        "shape": list(pixels.shape),
        "dtype": "uint8",
        "data": base64.b64encode(pixels.data).decode("ascii"),
    }
    return PreparedImage(pixels, image_data, None, None).with_digest(digest)


def check_compressed(data: bytes) -> None:
    """A PNG/JPEG header that declares a size the server accepts, without decoding the body."""
    if not data:
        raise BadFrame("compressed image has no data")
    try:
        declared = read_declared_size(data)
        check_pixel_count(declared.width, declared.height, MAX_PIXELS, "image header claims")
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
