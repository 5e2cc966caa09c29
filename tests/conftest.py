"""Suite-wide set-up that must happen before any test module is imported.

Triton fixes "compiled or interpreted" for each @triton.jit function, its own standard library
(tl.sum, tl.max, ...) included, when the function is defined, i.e. when triton.language is first
imported. transformers imports it through torch._dynamo, so on a machine without CUDA the Triton
interpreter must be switched on here, before any test module imports transformers.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
