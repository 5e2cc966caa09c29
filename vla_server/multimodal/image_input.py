"""Parse one ``image_data`` entry into RGB uint8 pixels ``[H, W, 3]``, enforcing the media policy.

Accepted forms, tried in this order:

* ``numpy.ndarray`` uint8 ``[H,W]``, ``[H,W,1]``, ``[H,W,3]`` or ``[H,W,4]`` (msgpack clients);
* ``dict`` raw pixels ``{"shape": [H,W,C] | [H,W], "dtype": "uint8", "data": base64 str | bytes}``
  with C in 1, 3 (RGB), 4 (RGBA, composited onto white); the byte count must equal H*W*C;
* ``bytes``: an encoded PNG or JPEG file;
* ``str`` starting with ``data:``: a base64 data URL of an image media type;
* ``str`` starting with ``http://`` / ``https://``: fetched only when ``allow_remote`` is on;
* ``str`` starting with ``file://``, or with ``/`` (except ``/9j/``, which is how every base64
  JPEG begins): a local path, read only inside ``allowed_local_media_path`` after resolving
  symlinks and ``..``;
* any other ``str``: standard-alphabet base64 of a PNG or JPEG file (whitespace is tolerated).

Limits are checked before anything large is decoded: ``max_image_bytes`` on the encoded (or raw)
payload, ``max_image_pixels`` on the size a PNG/JPEG header or a raw shape declares. Every failure
raises :class:`ImageInputError` naming the entry, e.g. ``image_data[1]: truncated or corrupt PNG``.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
from PIL import Image

from vla_frames.image_decode import (
    RgbFrame,
    array_to_rgb,
    as_pixels,
    check_pixel_count,
    decode_encoded_rgb,
)
from vla_frames.image_errors import ImageInputError
from vla_server.multimodal.local_media import read_local_image
from vla_server.multimodal.remote_media import fetch_image_url

ImageItem = str | bytes | dict[str, Any] | np.ndarray
_BASE64_JPEG_PREFIX = "/9j/"  # base64 of the JPEG start-of-image bytes FF D8 FF


@dataclass(frozen=True)
class MediaPolicy:
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096
    allowed_local_media_path: str | None = None  # None: local paths are refused
    allow_remote: bool = False
    remote_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_image_bytes <= 0 or self.max_image_pixels <= 0:
            raise ValueError("max_image_bytes and max_image_pixels must be positive")
        pil_limit = Image.MAX_IMAGE_PIXELS
        if pil_limit is not None and self.max_image_pixels > pil_limit:
            # Above PIL's own bomb threshold PIL would warn or raise before our check runs.
            raise ValueError(f"max_image_pixels may not exceed PIL's limit of {pil_limit}")


def load_images(items: Sequence[ImageItem], policy: MediaPolicy) -> list[np.ndarray]:
    return [load_image(item, index, policy) for index, item in enumerate(items)]


def load_image(item: ImageItem, index: int, policy: MediaPolicy) -> np.ndarray:
    """Pixels of ``image_data[index]``; raises :class:`ImageInputError` naming the entry."""
    return as_pixels(load_frame(item, index, policy))


def load_frame(item: ImageItem, index: int, policy: MediaPolicy) -> RgbFrame:
    """``load_image``, but encoded images stay the decoder's RGB PIL image (no array copy)."""
    try:
        return _load(item, policy)
    except ImageInputError as err:
        raise err.at(index) from None


def encoded_payload(item: ImageItem, index: int, policy: MediaPolicy) -> bytes | None:
    """The encoded PNG/JPEG bytes of ``image_data[index]`` (within ``max_image_bytes``), or None
    for raw pixels; raises :class:`ImageInputError` naming the entry."""
    if isinstance(item, np.ndarray | dict):
        return None
    try:
        data = _payload(item, policy)
        _check_byte_count(len(data), policy)
        return data
    except ImageInputError as err:
        raise err.at(index) from None


def decode_payload(data: bytes, index: int, policy: MediaPolicy) -> Image.Image:
    """``encoded_payload``'s bytes as a loaded RGB PIL image."""
    try:
        return decode_encoded_rgb(data, policy.max_image_pixels)
    except ImageInputError as err:
        raise err.at(index) from None


def _load(item: ImageItem, policy: MediaPolicy) -> RgbFrame:
    if isinstance(item, np.ndarray):
        _check_raw_size(item.shape, item.dtype.itemsize, policy)
        return array_to_rgb(item)
    if isinstance(item, dict):
        return _from_raw_dict(item, policy)
    return _from_encoded(_payload(item, policy), policy)


def _payload(item: ImageItem, policy: MediaPolicy) -> bytes:
    if isinstance(item, bytes | bytearray):
        return bytes(item)
    if isinstance(item, str):
        return _encoded_bytes_of_string(item, policy)
    raise ImageInputError(f"unsupported image_data type {type(item).__name__}")


def _encoded_bytes_of_string(text: str, policy: MediaPolicy) -> bytes:
    if text.startswith("data:"):
        return _data_url_payload(text, policy)
    if text.startswith(("http://", "https://")):
        if not policy.allow_remote:
            raise ImageInputError("remote image URLs are disabled on this server")
        return fetch_image_url(text, policy.max_image_bytes, policy.remote_timeout_s)
    if text.startswith("file://"):
        return _read_local(unquote(urlparse(text).path), policy)
    if text.startswith("/") and not text.startswith(_BASE64_JPEG_PREFIX):
        return _read_local(text, policy)
    if not text:
        raise ImageInputError("empty image")
    return _decode_base64(text, policy.max_image_bytes)


def _from_encoded(data: bytes, policy: MediaPolicy) -> Image.Image:
    _check_byte_count(len(data), policy)
    return decode_encoded_rgb(data, policy.max_image_pixels)


def _check_byte_count(n_bytes: int, policy: MediaPolicy) -> None:
    if n_bytes > policy.max_image_bytes:
        raise ImageInputError(
            f"image is {n_bytes} bytes, over the limit of {policy.max_image_bytes} "
            "(--max-image-bytes)"
        )


def _decode_base64(text: str, max_bytes: int) -> bytes:
    # Bound the output before allocating it: 4 base64 characters carry 3 bytes.
    if len(text) // 4 * 3 > max_bytes + 3:
        raise ImageInputError(
            f"image is about {len(text) // 4 * 3} bytes, over the limit of {max_bytes} "
            "(--max-image-bytes)"
        )
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error as exc:
        compact = "".join(text.split())
        if compact != text:
            return _decode_base64(compact, max_bytes)
        raise ImageInputError(f"invalid base64 ({exc})") from None


def _data_url_payload(url: str, policy: MediaPolicy) -> bytes:
    header, sep, payload = url[len("data:") :].partition(",")
    if not sep:
        raise ImageInputError("malformed data URL (no ',' before the payload)")
    media_type, *params = header.split(";")
    if media_type and not media_type.lower().startswith("image/"):
        raise ImageInputError(f"data URL media type {media_type!r} is not an image")
    if "base64" not in params:
        raise ImageInputError("data URL is not base64-encoded (';base64' missing)")
    return _decode_base64(payload, policy.max_image_bytes)


def _read_local(path_text: str, policy: MediaPolicy) -> bytes:
    if policy.allowed_local_media_path is None:
        raise ImageInputError("local image paths are disabled on this server")
    return read_local_image(path_text, policy.allowed_local_media_path, policy.max_image_bytes)


def _from_raw_dict(item: dict[str, Any], policy: MediaPolicy) -> np.ndarray:
    shape = _raw_shape(item.get("shape"))
    dtype = item.get("dtype", "uint8")
    if dtype != "uint8":
        raise ImageInputError(f"unsupported raw pixel dtype {dtype!r} (only 'uint8')")
    _check_raw_size(shape, 1, policy)
    data = item.get("data")
    if isinstance(data, str):
        data = _decode_base64(data, policy.max_image_bytes)
    elif not isinstance(data, bytes | bytearray):
        raise ImageInputError("raw pixels need 'data' as base64 text or bytes")
    expected = int(np.prod(shape))
    if len(data) != expected:
        raise ImageInputError(
            f"raw pixel data has {len(data)} bytes but shape {list(shape)} uint8 "
            f"needs {expected} (byte count mismatch)"
        )
    return array_to_rgb(np.frombuffer(data, dtype=np.uint8).reshape(shape))


def _raw_shape(shape: Any) -> tuple[int, ...]:
    valid = (
        isinstance(shape, list | tuple)
        and len(shape) in (2, 3)
        and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
        and (len(shape) == 2 or shape[2] in (1, 3, 4))
    )
    if not valid:
        raise ImageInputError(
            f"unsupported raw pixel shape {shape!r} (expected [H,W] or [H,W,C], C in 1, 3, 4)"
        )
    return tuple(shape)


def _check_raw_size(shape: tuple[int, ...], itemsize: int, policy: MediaPolicy) -> None:
    if len(shape) >= 2:
        check_pixel_count(shape[1], shape[0], policy.max_image_pixels, "raw pixel shape declares")
    _check_byte_count(int(np.prod(shape)) * itemsize, policy)
