"""RGB uint8 pixels -> float32 ``pixel_values [3, H, W]``, as transformers' PIL image processors.

The steps and their arithmetic follow ``transformers.image_processing_backends.PilBackend`` so the
result matches ``SiglipImageProcessorPil`` / ``CLIPImageProcessorPil`` to float32 rounding: a PIL
resize of the uint8 image (filter from the config), a center crop of the uint8 result (zero
padding where the image is smaller), rescale in float64 then cast to float32, and normalisation
``(x - mean) / std`` in float32. The last two run as a per-channel table lookup built from that
arithmetic (``value_tables``: the same float32 values, one pass).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from vla_server.multimodal.image_decode import RgbFrame, as_pil, as_pixels, frame_hw
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.multimodal.value_tables import look_up, value_tables


def preprocess_image(pixels: RgbFrame, cfg: PreprocessConfig) -> np.ndarray:
    """``pixels``: uint8 ``[H, W, 3]`` RGB; returns C-contiguous float32 ``[3, H', W']``."""
    image = _resize(pixels, cfg) if cfg.do_resize else as_pixels(pixels)
    chw = np.moveaxis(image, -1, 0)
    if cfg.crop_hw is not None:
        chw = _center_crop(chw, cfg.crop_hw)
    return look_up(chw, _tables(cfg))


def normalise(chw: np.ndarray, cfg: PreprocessConfig) -> np.ndarray:
    """transformers' arithmetic on uint8 ``[3, H, W]``: rescale in float64, cast to float32,
    ``(x - mean) / std`` in float32. Run on 0..255 once per config (``value_tables``)."""
    if cfg.rescale_factor is not None:
        values = (chw.astype(np.float64) * cfg.rescale_factor).astype(np.float32)
    else:
        values = chw.astype(np.float32)
    if cfg.image_mean is not None and cfg.image_std is not None:
        mean = np.asarray(cfg.image_mean, dtype=np.float32)[:, None, None]
        std = np.asarray(cfg.image_std, dtype=np.float32)[:, None, None]
        values = (values - mean) / std
    return values


@functools.cache
def _tables(cfg: PreprocessConfig) -> np.ndarray:
    return value_tables(lambda chw: normalise(chw, cfg))


def resized_hw(height: int, width: int, cfg: PreprocessConfig) -> tuple[int, int]:
    """Output (height, width) of the resize step for an input of ``height`` x ``width``."""
    if cfg.resize_hw is not None:
        return cfg.resize_hw
    assert cfg.shortest_edge is not None
    return short_side_hw(height, width, cfg.shortest_edge)


def short_side_hw(height: int, width: int, short_side: int) -> tuple[int, int]:
    """(height, width) scaled so the short side is `short_side`, the long one truncated: the
    arithmetic of transformers' get_resize_output_image_size(default_to_square=False) and of
    torchvision's resize with an int size."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(short_side * long / short)
    return (new_long, short_side) if width <= height else (short_side, new_long)


def _resize(pixels: RgbFrame, cfg: PreprocessConfig) -> np.ndarray:
    height, width = resized_hw(*frame_hw(pixels), cfg)
    if (height, width) == frame_hw(pixels):
        return as_pixels(pixels)  # PIL would return an identical copy
    return np.asarray(as_pil(pixels).resize((width, height), resample=cfg.resample))


def _center_crop(chw: np.ndarray, crop_hw: tuple[int, int]) -> np.ndarray:
    crop_h, crop_w = crop_hw
    height, width = chw.shape[1:]
    if crop_h > height or crop_w > width:
        chw, height, width = _pad_to(chw, max(crop_h, height), max(crop_w, width))
    top = (height - crop_h) // 2
    left = (width - crop_w) // 2
    return chw[:, top : top + crop_h, left : left + crop_w]


def _pad_to(chw: np.ndarray, height: int, width: int) -> tuple[np.ndarray, int, int]:
    # Zero padding placed as transformers' center_crop does (ceil of half the missing rows).
    padded = np.zeros((chw.shape[0], height, width), dtype=chw.dtype)
    top = math.ceil((height - chw.shape[1]) / 2)
    left = math.ceil((width - chw.shape[2]) / 2)
    padded[:, top : top + chw.shape[1], left : left + chw.shape[2]] = chw
    return padded, height, width
