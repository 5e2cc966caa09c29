"""Encoding rendered RGB frames the way a camera driver's compressed transport would."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

# compressed_image_transport's format strings: source encoding; codec compressed <decoded order>.
CODEC_FORMATS = {"jpeg": "rgb8; jpeg compressed bgr8", "png": "rgb8; png compressed bgr8"}


def encode_rgb(pixels: np.ndarray, codec: str, jpeg_quality: int = 80) -> bytes:
    """JPEG or PNG bytes of an (H, W, 3) uint8 RGB array (deterministic for fixed input)."""
    buf = io.BytesIO()
    image = Image.fromarray(pixels)  # (H, W, 3) uint8 is RGB
    if codec == "jpeg":
        image.save(buf, format="JPEG", quality=jpeg_quality)
    elif codec == "png":
        image.save(buf, format="PNG")
    else:
        raise ValueError(f"codec must be one of {sorted(CODEC_FORMATS)}, got {codec!r}")
    return buf.getvalue()
