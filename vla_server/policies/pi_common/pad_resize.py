"""RGB uint8 pixels -> pi-family `pixel_values [3, H, W]` in [-1, 1], as LeRobot prepares them.

LeRobot's pi0/pi0.5/pi0-FAST policies (`_preprocess_images`, with openpi's
`resize_with_pad_torch`): the frame as float32 in [0, 1] (`/ 255`); unless it already has the
configured size, scaled by `ratio = max(w / W, h / H)` to `(int(h / ratio), int(w / ratio))`
with torch's bilinear interpolation (`align_corners=False`, no antialiasing), clamped to
[0, 1], and padded with black (0) to `H x W`, the padding split `(missing // 2, the rest)` on
top/bottom and left/right; then `x * 2 - 1`. LeRobot's SmolVLA (`LeftTopPadResize`) does the
same but pads on the left and top only (the frame sits at the bottom right).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from vla_frames.image_decode import RgbFrame, as_pixels
from vla_server.multimodal.preprocess_config import settings_digest


@dataclass(frozen=True)
class PadResize:
    height: int
    width: int

    def digest(self) -> bytes:
        return settings_digest(self, b"pad-resize:")

    @property
    def reads_arrays(self) -> bool:
        return True

    def apply(self, pixels: RgbFrame) -> np.ndarray:
        return pad_resize(pixels, self)


@dataclass(frozen=True)
class LeftTopPadResize(PadResize):
    def digest(self) -> bytes:
        return settings_digest(self, b"pad-resize-left-top:")

    def apply(self, pixels: RgbFrame) -> np.ndarray:
        return pad_resize(pixels, self, centered=False)


def pad_resize(pixels: RgbFrame, cfg: PadResize, centered: bool = True) -> np.ndarray:
    """uint8 RGB `[h, w, 3]` (or a PIL image) -> C-contiguous float32 `[3, H, W]` in [-1, 1];
    `centered` False: all the padding on the left and top."""
    image = torch.from_numpy(np.array(as_pixels(pixels))).permute(2, 0, 1)  # a writable copy
    image = image.to(torch.float32)[None] / 255.0
    height, width = image.shape[-2:]
    if (height, width) != (cfg.height, cfg.width):
        ratio = max(width / cfg.width, height / cfg.height)
        size = (int(height / ratio), int(width / ratio))
        image = F.interpolate(image, size=size, mode="bilinear", align_corners=False)
        image = image.clamp(0.0, 1.0)
        top, left = cfg.height - size[0], cfg.width - size[1]
        if centered:
            top, left = top // 2, left // 2
        pad = (left, cfg.width - size[1] - left, top, cfg.height - size[0] - top)
        image = F.pad(image, pad, mode="constant", value=0.0)
    return np.ascontiguousarray((image[0] * 2.0 - 1.0).numpy())
