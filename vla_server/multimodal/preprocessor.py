"""What the image pipeline needs from a checkpoint's image preprocessing, as an interface: the
family picks the implementation (transformers' image processor settings, resize-with-pad, a
fused tower's transforms)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from vla_frames.image_decode import RgbFrame


class ImagePreprocessor(Protocol):
    @property
    def reads_arrays(self) -> bool:
        """Whether `apply` reads the decoded pixel array (else a PIL image of the frame)."""
        ...

    def digest(self) -> bytes:
        """A digest of every setting that decides the output (part of the pixel cache key)."""
        ...

    def apply(self, pixels: RgbFrame) -> np.ndarray:
        """One decoded frame -> float32 [C, H, W] model input."""
        ...
