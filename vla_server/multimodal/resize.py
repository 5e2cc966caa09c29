"""Resize uint8 RGB frames the way one of transformers' two image-processor backends does.

* ``pil`` (the default): PIL's resize, as transformers' PIL backend (``*ImageProcessorPil``) and
  the fused-tower VLAs' processor run it; the node's output is bit-identical to theirs.
* ``torch``: torch's antialiased uint8 interpolation, the kernel transformers' default backend
  (torchvision) runs on CPU for bilinear and bicubic filters, in about a quarter of PIL's time on
  a 640x480 frame. Its tolerance against PIL: a frame shrunk to the model's input differs by at
  most one level (two at a sharp edge, such as a letterbox border) in under 2% of the values;
  enlarging noise-like content differed by up to 21 levels in the tests. Filters the kernel does
  not have (nearest, box, hamming, lanczos) resize with PIL on both.

Settings objects carry the backend as ``resize_backend``, and their digest
(``preprocess_config.settings_digest``) scopes image hashes to it, so frames resized one way are
never served from a cache filled the other way.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F

from vla_frames.image_decode import RgbFrame, as_pil, as_pixels

_TORCH_FILTERS = {2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling value -> torch mode


def resize_rgb(frame: RgbFrame, hw: tuple[int, int], resample: int, backend: str) -> np.ndarray:
    """uint8 RGB ``[H, W, 3]`` (or an RGB PIL image) -> uint8 ``[h, w, 3]`` for ``hw`` = (h, w)."""
    if backend == "torch" and resample in _TORCH_FILTERS:
        return _torch_resize(as_pixels(frame), hw, _TORCH_FILTERS[resample])
    return np.asarray(as_pil(frame).resize((hw[1], hw[0]), resample=resample))


def _torch_resize(pixels: np.ndarray, hw: tuple[int, int], mode: str) -> np.ndarray:
    with warnings.catch_warnings():
        # A decoded frame's array is read-only; interpolate only reads its input.
        warnings.simplefilter("ignore", UserWarning)
        source = torch.from_numpy(pixels)
    # [1, 3, H, W] over the [H, W, 3] memory: channels-last, which the uint8 kernel reads in place.
    out = F.interpolate(
        source.permute(2, 0, 1).unsqueeze(0),
        size=hw,
        mode=mode,
        align_corners=False,
        antialias=True,
    )
    return out[0].permute(1, 2, 0).numpy()
