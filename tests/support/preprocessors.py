"""The tests' view of a preprocessing config (transformers' settings, a Prismatic or a
resize-with-pad one) as the `ImagePreprocessor` the pipeline runs."""

from __future__ import annotations

import numpy as np

from vla_frames.image_decode import RgbFrame
from vla_server.multimodal.preprocess import HfImagePreprocessor
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.policies.openvla.prismatic_preprocess import PrismaticPreprocess
from vla_server.policies.pi_common.pad_resize import PadResize

Preprocessor = PreprocessConfig | PrismaticPreprocess | PadResize


def as_preprocessor(cfg: Preprocessor) -> ImagePreprocessor:
    return HfImagePreprocessor(cfg) if isinstance(cfg, PreprocessConfig) else cfg


def apply_preprocessor(pixels: RgbFrame, cfg: Preprocessor) -> np.ndarray:
    return as_preprocessor(cfg).apply(pixels)
