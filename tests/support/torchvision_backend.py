"""transformers' TorchvisionBackend for one uint8 frame on CPU, spelled out with plain torch ops:
the reference `--image-backend torch` is held to (torchvision itself does not install next to the
CPU torch build here)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from vla_server.multimodal.preprocess import resized_hw
from vla_server.multimodal.preprocess_config import PreprocessConfig

TORCH_MODES = {2: "bilinear", 3: "bicubic"}


def torchvision_backend(pixels: np.ndarray, cfg: PreprocessConfig) -> np.ndarray:
    """transformers' TorchvisionBackend for one uint8 frame on CPU, with plain torch ops: resize,
    center crop (zero padding, the odd row at the bottom), rescale fused into normalisation."""
    chw = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()  # NCHW, not ours
    hw = resized_hw(*pixels.shape[:2], cfg)
    if hw != tuple(pixels.shape[:2]):
        chw = F.interpolate(chw[None], size=hw, mode=TORCH_MODES[cfg.resample], antialias=True)[0]
    if cfg.crop_hw is not None:
        (crop_h, crop_w), (h, w) = cfg.crop_hw, chw.shape[1:]
        pad_top, pad_left = max(crop_h - h, 0) // 2, max(crop_w - w, 0) // 2
        chw = F.pad(
            chw, (pad_left, max(crop_w - w, 0) - pad_left, pad_top, max(crop_h - h, 0) - pad_top)
        )
        (h, w) = chw.shape[1:]
        top, left = int((h - crop_h) / 2.0), int((w - crop_w) / 2.0)
        chw = chw[:, top : top + crop_h, left : left + crop_w]
    values = chw.to(torch.float32)
    if cfg.image_mean is None:
        return (values * cfg.rescale_factor if cfg.rescale_factor else values).numpy()
    scale = 1.0 / cfg.rescale_factor if cfg.rescale_factor else 1.0
    mean = torch.tensor(cfg.image_mean) * scale
    std = torch.tensor(cfg.image_std) * scale
    return ((values - mean[:, None, None]) / std[:, None, None]).numpy()
