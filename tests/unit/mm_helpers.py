"""Image fixtures shared by the multimodal unit tests."""

from __future__ import annotations

import io

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
