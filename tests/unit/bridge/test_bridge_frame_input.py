"""Frame validation and conversion, and the edge hash equal to the server's for the same image."""

from __future__ import annotations

import base64
import dataclasses
import io
import struct

import numpy as np
import pytest
import xxhash
from PIL import Image

from ros_bridge.camera_frame import compressed_frame, raw_frame
from ros_bridge.frame_input import BadFrame, prepare_image, raw_to_rgb
from vla_frames.image_hash import format_mm_hash, image_hash
from vla_server.multimodal.image_input import MediaPolicy, load_image

DIGEST = bytes(range(16))
RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)


def padded(pixels: np.ndarray, encoding: str, pad: int) -> object:
    """A raw frame whose rows carry `pad` junk bytes after the pixels (step > width*channels)."""
    height, width = pixels.shape[:2]
    rows = pixels.reshape(height, -1)
    junk = np.full((height, pad), 0xAB, np.uint8)
    frame = raw_frame("/cam", 1, np.ascontiguousarray(np.hstack([rows, junk])), encoding)
    return dataclasses.replace(frame, width=width, step=rows.shape[1] + pad)


def reference_hash(pixels: np.ndarray, digest: bytes) -> str:
    """The hash layout from image_hash's documentation, written out independently."""
    h = xxhash.xxh3_128(b"vla-image-v1\0" + struct.pack("<III", *pixels.shape) + digest)
    h.update(np.ascontiguousarray(pixels).tobytes())
    return f"{h.intdigest():032x}"


def jpeg_bytes(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=85)
    return buf.getvalue()


@pytest.mark.parametrize("pad", [0, 3])
def test_rgb_bgr_mono_rgba_convert_to_rgb(pad: int) -> None:
    assert np.array_equal(raw_to_rgb(padded(RGB, "rgb8", pad)), RGB)
    assert np.array_equal(raw_to_rgb(padded(RGB[:, :, ::-1].copy(), "bgr8", pad)), RGB)
    grey = RGB[:, :, 0].copy()
    assert np.array_equal(raw_to_rgb(padded(grey[:, :, None], "mono8", pad)), np.dstack([grey] * 3))
    alpha = RNG.integers(0, 256, size=(6, 5, 1), dtype=np.uint8)
    rgba = np.concatenate([RGB, alpha], axis=2)
    white = Image.new("RGBA", (5, 6), (255, 255, 255, 255))
    expected = np.asarray(
        Image.alpha_composite(white, Image.fromarray(rgba, "RGBA")).convert("RGB")
    )
    assert np.array_equal(raw_to_rgb(padded(rgba, "rgba8", pad)), expected)
    bgra = np.concatenate([RGB[:, :, ::-1], alpha], axis=2)
    assert np.array_equal(raw_to_rgb(padded(bgra, "bgra8", pad)), expected)


def bad_raw(**changes: object) -> object:
    frame = raw_frame("/cam", 1, RGB, "rgb8")
    return dataclasses.replace(frame, **changes)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"encoding": "32FC1"}, "unsupported encoding"),
        ({"encoding": "yuv422"}, "unsupported encoding"),
        ({"height": 0, "data": b""}, "empty image"),
        ({"width": 0}, "empty image"),
        ({"data": RGB.tobytes()[:-1]}, "step*height"),
        ({"step": 14, "data": RGB.tobytes()[: 14 * 6]}, "step 14 <"),
    ],
)
def test_bad_raw_frames_are_rejected(changes: dict, words: str) -> None:
    with pytest.raises(BadFrame, match=words.replace("*", r"\*")):
        prepare_image(bad_raw(**changes), DIGEST)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xd8\xff\xe0 not really a jpeg",
        jpeg_bytes(RGB)[:40],
        b"plain text",
        # a header that declares 100000 x 100000 pixels
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + (100000).to_bytes(4, "big") * 2,
    ],
)
def test_compressed_frames_with_a_bad_header_are_rejected(data: bytes) -> None:
    with pytest.raises(BadFrame):
        prepare_image(compressed_frame("/cam", 1, data, "rgb8; jpeg compressed bgr8"), DIGEST)


def test_compressed_frames_travel_as_sent_and_the_server_hashes_them() -> None:
    """No decode at the edge: the original bytes go out with no `mm_hashes`, so the server's own
    hash of what it decodes names the frame (a repeated frame still hits its caches)."""
    jpeg = jpeg_bytes(RNG.integers(0, 256, size=(48, 64, 3), dtype=np.uint8))
    image = prepare_image(compressed_frame("/cam", 1, jpeg, "rgb8; jpeg compressed bgr8"), DIGEST)
    assert base64.b64decode(image.image_data) == jpeg  # the original bytes travel
    assert image.pixels is None and image.mm_hash is None
    assert image.with_digest(bytes(16)) is image


@pytest.mark.parametrize("encoding", ["bgr8", "mono8"])
def test_raw_hash_equals_the_servers_for_the_pixels_sent(encoding: str) -> None:
    source = RGB[:, :, ::-1].copy() if encoding == "bgr8" else RGB[:, :, :1].copy()
    image = prepare_image(padded(source, encoding, 2), DIGEST)
    assert image.image_data["shape"] == [6, 5, 3]
    server_pixels = load_image(image.image_data, 0, MediaPolicy())
    assert image.mm_hash == format_mm_hash(image_hash(server_pixels, DIGEST))
    expected = RGB if encoding == "bgr8" else np.dstack([RGB[:, :, 0]] * 3)
    assert image.mm_hash == reference_hash(expected, DIGEST)


def test_hash_waits_for_the_digest_and_follows_it() -> None:
    image = prepare_image(raw_frame("/cam", 1, RGB, "rgb8"), None)
    assert image.mm_hash is None
    hashed = image.with_digest(DIGEST)
    assert hashed.mm_hash == reference_hash(RGB, DIGEST)
    assert hashed.with_digest(DIGEST) is hashed
    assert hashed.with_digest(bytes(16)).mm_hash == reference_hash(RGB, bytes(16))
