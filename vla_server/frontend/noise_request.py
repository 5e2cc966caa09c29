"""A caller's starting noise for a denoised chunk (SGLang's `observation.noise`), checked.

A denoising head integrates its chunk from noise `[chunk_size, width]` (`model/denoise.py`); by
default that noise is drawn from the request's seed. A caller that brings its own (to compare with
another implementation on the very same noise) gives it here: float values of exactly the head's
shape, finite. Anything else is a RequestError naming `noise`. It is checked when the action query
is built (`action_request.action_item`), so the request's wire message carries it as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.frontend.tokenizer_manager import TokenizerManager
from vla_server.io_struct import Tensor
from vla_server.policies.base import Denoise, GuidedFrontend


def denoise_spec(tm: TokenizerManager) -> Denoise | None:
    """The served head's denoising shapes (None: its actions are not a denoised chunk)."""
    if not isinstance(tm.policy, GuidedFrontend):  # cheap: only denoising heads are guided
        return None
    head = tm.family.head_spec(tm.tokenizer, tm.info.vocab_size)
    return head if isinstance(head, Denoise) else None


def checked_noise(tm: TokenizerManager, noise: Any) -> Tensor | None:
    """The wire's noise of an action query (None when it gives none)."""
    if noise is None:
        return None
    head = denoise_spec(tm)
    if head is None:
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
