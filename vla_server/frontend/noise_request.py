"""A caller's starting noise for a denoised chunk (SGLang's `observation.noise`), checked.

A denoising head integrates its chunk from noise `[chunk_size, width]` (`model/denoise.py`);
by default that noise is drawn from the request's seed. A caller that brings its own (to compare
with another implementation on the very same noise) gives it here: float values of exactly the
head's shape, finite. Anything else is a RequestError naming `noise`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.io_struct import Tensor
from vla_server.policies.base import Denoise, HeadSpec


def wire_noise(noise: Any, head: HeadSpec | None, num_actions: int | None) -> Tensor | None:
    """The wire's noise of a request (None when it gives none)."""
    if noise is None:
        return None
    if not num_actions or not isinstance(head, Denoise):
        raise RequestError("only a denoised action chunk starts from noise", "noise")
    try:
        array = np.asarray(noise, dtype=np.float32)
    except (TypeError, ValueError):
        raise RequestError("must be an array of numbers", "noise") from None
    shape = [head.chunk_size, head.width]
    if list(array.shape) != shape:
        raise RequestError(f"has shape {list(array.shape)}; this head denoises {shape}", "noise")
    if not np.isfinite(array).all():
        raise RequestError("must be finite", "noise")
    return Tensor.from_numpy(array)
