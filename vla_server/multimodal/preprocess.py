"""RGB uint8 pixels -> float32 ``pixel_values [3, H, W]``, as transformers' image processors.

With ``resize_backend`` "pil" the steps and their arithmetic follow
``transformers.image_processing_backends.PilBackend``, so the result matches
``SiglipImageProcessorPil`` / ``CLIPImageProcessorPil`` bit for bit: a PIL resize of the uint8
image (filter from the config), a center crop of the uint8 result (zero padding where the image
is smaller, the extra row on top), rescale in float64 then cast to float32, and normalisation
``(x - mean) / std`` in float32. With "torch" they follow its ``TorchvisionBackend`` on CPU:
torch's uint8 antialiased resize, the extra padding row at the bottom, and rescale fused into
normalisation, ``(x - mean / f) / (std / f)`` in float32. Either normalisation runs as a
per-channel table lookup built from its arithmetic (``value_tables``: the same float32 values,
one pass).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from vla_frames.image_decode import RgbFrame, as_pixels, frame_hw
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.multimodal.resize import resize_rgb
from vla_server.multimodal.value_tables import look_up, value_tables


@dataclass(frozen=True)
class HfImagePreprocessor:
    """A transformers image processor's settings as an `ImagePreprocessor`."""

    cfg: PreprocessConfig

    @property
    def reads_arrays(self) -> bool:
        return self.cfg.resize_backend == "torch"

    def digest(self) -> bytes:
        return self.cfg.digest()

    def apply(self, pixels: RgbFrame) -> np.ndarray:
        return preprocess_image(pixels, self.cfg)


def preprocess_image(pixels: RgbFrame, cfg: PreprocessConfig) -> np.ndarray:
    """``pixels``: uint8 ``[H, W, 3]`` RGB; returns C-contiguous float32 ``[3, H', W']``."""
    image = _resize(pixels, cfg) if cfg.do_resize else as_pixels(pixels)
    chw = np.moveaxis(image, -1, 0)
    if cfg.crop_hw is not None:
        chw = _center_crop(chw, cfg.crop_hw, top_heavy=cfg.resize_backend == "pil")
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


def fused_normalise(chw: np.ndarray, cfg: PreprocessConfig) -> np.ndarray:
    """transformers' torchvision-backend arithmetic on uint8 ``[3, H, W]``: float32 throughout,
    a rescale with normalisation folded into the mean and std (``/ rescale_factor``)."""
    values = torch.from_numpy(chw.astype(np.float32))
    mean, std = cfg.image_mean, cfg.image_std
    if mean is not None and std is not None:
        mean_t, std_t = torch.tensor(mean), torch.tensor(std)
        if cfg.rescale_factor is not None:
            mean_t, std_t = mean_t * (1.0 / cfg.rescale_factor), std_t * (1.0 / cfg.rescale_factor)
        values = (values - mean_t[:, None, None]) / std_t[:, None, None]
    elif cfg.rescale_factor is not None:
        values = values * cfg.rescale_factor
    return values.numpy()


@functools.cache
def _tables(cfg: PreprocessConfig) -> np.ndarray:
    arithmetic = normalise if cfg.resize_backend == "pil" else fused_normalise
    return value_tables(lambda chw: arithmetic(chw, cfg))


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
    hw = resized_hw(*frame_hw(pixels), cfg)
    if hw == frame_hw(pixels):
        return as_pixels(pixels)  # both backends would return an identical copy
    return resize_rgb(pixels, hw, cfg.resample, cfg.resize_backend)


def _center_crop(chw: np.ndarray, crop_hw: tuple[int, int], top_heavy: bool) -> np.ndarray:
    crop_h, crop_w = crop_hw
    height, width = chw.shape[1:]
    if crop_h > height or crop_w > width:
        chw, height, width = _pad_to(chw, max(crop_h, height), max(crop_w, width), top_heavy)
    top = (height - crop_h) // 2
    left = (width - crop_w) // 2
    return chw[:, top : top + crop_h, left : left + crop_w]


def _pad_to(
    chw: np.ndarray, height: int, width: int, top_heavy: bool
) -> tuple[np.ndarray, int, int]:
    # Zero padding placed as each backend's center_crop does: an odd missing row goes on top
    # (PIL backend: ceil of half) or at the bottom (torchvision backend: floor of half).
    padded = np.zeros((chw.shape[0], height, width), dtype=chw.dtype)
    half = math.ceil if top_heavy else math.floor
    top = half((height - chw.shape[1]) / 2)
    left = half((width - chw.shape[2]) / 2)
    padded[:, top : top + chw.shape[1], left : left + chw.shape[2]] = chw
    return padded, height, width
