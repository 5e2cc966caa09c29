"""Test images (noise and camera-like gradients) and the wire forms `image_data` accepts."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from PIL import Image


def random_rgb(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def smooth_rgb(height: int, width: int) -> np.ndarray:
    """A camera-like gradient (JPEG-friendly, unlike noise)."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack(
        [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1
    ).astype(np.uint8)


def encode(pixels: np.ndarray, fmt: str, **save_kwargs: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt, **save_kwargs)
    return buffer.getvalue()


def png_bytes(pixels: np.ndarray) -> bytes:
    return encode(pixels, "PNG")


def png_base64(pixels: np.ndarray) -> str:
    return base64.b64encode(png_bytes(pixels)).decode()


def image_payload(pixels: np.ndarray, form: str) -> Any:
    """One `image_data` entry for RGB uint8 `pixels` in the given wire form."""
    if form == "png":
        return png_base64(pixels)
    if form == "data_url":
        return "data:image/png;base64," + png_base64(pixels)
    if form == "raw":
        data = base64.b64encode(np.ascontiguousarray(pixels).tobytes()).decode()
        return {"shape": list(pixels.shape), "dtype": "uint8", "data": data}
    raise ValueError(form)
