"""Which image preprocessing a checkpoint uses, read from its processor config, and running it.

LLaVA-format checkpoints name a `transformers` image processor (`PreprocessConfig`,
`preprocess_image`); Prismatic/OpenVLA folders name `PrismaticImageProcessor`
(`PrismaticPreprocess`, `prismatic_preprocess`); LeRobot pi-family policies resize with padding
to their `image_resolution` (`PadResize`, `pad_resize`). All give float32 `[C, H, W]` and a
digest that scopes image hashes to the settings. The first two resize with either of
transformers' backends (`resize`); the third is torch arithmetic already.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from vla_frames.image_decode import RgbFrame
from vla_server.model.lerobot_config import lerobot_spec
from vla_server.multimodal.pad_resize import PadResize, pad_resize
from vla_server.multimodal.preprocess import preprocess_image
from vla_server.multimodal.preprocess_config import PreprocessConfig, read_image_processor_dict
from vla_server.multimodal.prismatic_preprocess import (
    PRISMATIC_PROCESSOR,
    PrismaticPreprocess,
    prismatic_preprocess,
)

Preprocessor = PreprocessConfig | PrismaticPreprocess | PadResize


def load_preprocessor(folder: str | Path, resize_backend: str = "pil") -> Preprocessor:
    policy = lerobot_spec(folder)
    if policy is not None:
        return PadResize(*policy.image_resolution)
    raw = read_image_processor_dict(Path(folder))
    if raw.get("image_processor_type") == PRISMATIC_PROCESSOR:
        cfg: Preprocessor = PrismaticPreprocess.from_dict(raw)
    else:
        cfg = PreprocessConfig.from_dict(raw)
    return dataclasses.replace(cfg, resize_backend=resize_backend)


def reads_arrays(cfg: Preprocessor) -> bool:
    """Whether preprocessing starts from a pixel array (torch ops) rather than a PIL image."""
    return isinstance(cfg, PadResize) or cfg.resize_backend == "torch"


def apply_preprocessor(pixels: RgbFrame, cfg: Preprocessor) -> np.ndarray:
    """uint8 RGB `[H, W, 3]` (or an RGB PIL image) -> C-contiguous float32 `[C, H', W']`."""
    if isinstance(cfg, PrismaticPreprocess):
        return prismatic_preprocess(pixels, cfg)
    if isinstance(cfg, PadResize):
        return pad_resize(pixels, cfg)
    return preprocess_image(pixels, cfg)
