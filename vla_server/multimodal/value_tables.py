"""Per-channel normalisation of uint8 pixels as 256-entry float32 tables, bit-identical to the
arithmetic they are built from.

Rescale and normalise act on each value alone, so for uint8 input the result of any such
arithmetic is one of 256 float32 numbers per channel: the table is that arithmetic run once on
0..255, and a lookup returns exactly what the arithmetic would. It also writes ``[C, H, W]``
contiguously in one pass, where the arithmetic on a channel-last view broadcasts the per-channel
mean/std over an inner loop of length 3.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Normalise = Callable[[np.ndarray], np.ndarray]  # uint8 [C, H, W] -> float32 [C, H, W]


def value_tables(normalise: Normalise, channels: int = 3) -> np.ndarray:
    """``[channels, 256]`` float32: ``normalise`` of every uint8 value, channel by channel."""
    values = np.broadcast_to(np.arange(256, dtype=np.uint8), (channels, 1, 256))
    return np.ascontiguousarray(normalise(values)[:, 0, :], dtype=np.float32)


def look_up(chw: np.ndarray, tables: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 ``[C, H, W]`` (any strides) -> C-contiguous float32 ``[C, H, W]`` (or into ``out``)."""
    if out is None:
        out = np.empty(chw.shape, dtype=np.float32)
    for channel in range(chw.shape[0]):
        np.take(tables[channel], chw[channel], out=out[channel])
    return out
