"""Fetch an image over http(s) with a byte cap (only used when remote media is switched on)."""

from __future__ import annotations

import httpx

from vla_frames.image_errors import ImageInputError

MAX_REDIRECTS = 3


def fetch_image_url(url: str, max_bytes: int, timeout_s: float) -> bytes:
    """GET ``url``; stops reading as soon as the (decompressed) body passes ``max_bytes``."""
    try:
        with (
            httpx.Client(
                timeout=timeout_s, follow_redirects=True, max_redirects=MAX_REDIRECTS
            ) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise ImageInputError(f"image URL returned HTTP {response.status_code}")
            _check_declared_length(response.headers.get("content-length"), max_bytes)
            return _read_capped(response, max_bytes)
    except httpx.HTTPError as exc:
        raise ImageInputError(f"could not fetch image URL ({type(exc).__name__})") from None


def _check_declared_length(header: str | None, max_bytes: int) -> None:
    if header is not None and header.isdigit() and int(header) > max_bytes:
        raise ImageInputError(
            f"image URL body is {header} bytes, over the limit of {max_bytes} (--max-image-bytes)"
        )


def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    for chunk in response.iter_bytes():
        total += len(chunk)
        if total > max_bytes:
            raise ImageInputError(
                f"image URL body exceeds the limit of {max_bytes} bytes (--max-image-bytes)"
            )
        chunks.append(chunk)
    return b"".join(chunks)
