"""The FAST action codec (Pertsch et al. 2025, `physical-intelligence/fast`) and the PaliGemma id
mapping pi0-FAST generates its tokens through.

A chunk `a [H, D]` (normalised actions) is encoded as `q = round(dct(a, time, ortho) * scale)`,
flattened row-major (all dims of coefficient 0, then coefficient 1, ...), each value written as
`chr(max(q - min_token, 0))`, and the string BPE-encoded with the tokenizer's `tokenizer.json`.
Decoding reverses it: BPE-decode to a string, `ord(ch) + min_token` per character, reshape to
`(H, D)`, `idct(c / scale, time, ortho)`. The reference decoder turns a sequence of the wrong
length into zeros; here it is an error naming the problem (`FastDecodeError`), unless the
caller asks for LeRobot's relaxed decoding (`decode_actions_with_fast`), which pads the
coefficients with zeros or truncates them to `H * D` first.

PaliGemma id <-> FAST token: `id = vocab_size - 1 - skip - t` (openpi
`_act_tokens_to_paligemma_tokens`, LeRobot `ActionTokenizerProcessorStep`), with the text
vocabulary size from the model config and `skip` its `fast_skip_tokens`; the map is its own
inverse. The DCT is a matrix product (no scipy at run time).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROCESSOR_CONFIG = "processor_config.json"
_REPLACEMENT = "\ufffd"  # what a byte-level decode yields for bytes that are not UTF-8


class FastDecodeError(ValueError):
    """A FAST token sequence that does not decode to a chunk (strict decoding)."""


@functools.cache
def dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix `C [n, n]`: `dct(x, norm="ortho") = C @ x`; `C.T` undoes it."""
    k = np.arange(n)[:, None]
    t = np.arange(n)[None, :]
    basis = np.cos(np.pi * (2 * t + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    basis[0] /= np.sqrt(2.0)
    return basis


def to_fast_tokens(ids: Any, vocab_size: int, skip: int) -> np.ndarray:
    """PaliGemma ids -> FAST tokens, and FAST tokens -> PaliGemma ids (the map is an involution)."""
    return vocab_size - 1 - skip - np.asarray(ids, dtype=np.int64)


@dataclass(frozen=True)
class FastSettings:
    scale: float
    vocab_size: int
    min_token: int
    action_dim: int | None  # None: from the policy config
    time_horizon: int | None

    @classmethod
    def read(cls, folder: Path) -> FastSettings:
        raw = json.loads((folder / PROCESSOR_CONFIG).read_text())
        for key in ("scale", "vocab_size", "min_token"):
            if raw.get(key) is None:
                raise ValueError(f"{folder / PROCESSOR_CONFIG}: {key} is missing")
        dim, horizon = raw.get("action_dim"), raw.get("time_horizon")
        return cls(
            scale=float(raw["scale"]),
            vocab_size=int(raw["vocab_size"]),
            min_token=int(raw["min_token"]),
            action_dim=None if dim is None else int(dim),
            time_horizon=None if horizon is None else int(horizon),
        )


class FastCodec:
    """Chunks of `horizon x dim` normalised actions <-> FAST tokens."""

    def __init__(self, bpe: Any, settings: FastSettings, horizon: int, dim: int):
        self.bpe = bpe  # a `tokenizers.Tokenizer`
        self.settings = settings
        self.horizon = horizon
        self.dim = dim
        self.bpe_size = bpe.get_vocab_size(with_added_tokens=True)
        if self.bpe_size > settings.vocab_size:
            raise ValueError(
                f"the FAST BPE has {self.bpe_size} tokens, processor_config says vocab_size "
                f"{settings.vocab_size}"
            )

    @classmethod
    def from_folder(cls, folder: Path, horizon: int, dim: int) -> FastCodec:
        """From a FAST tokenizer folder; its processor_config's `time_horizon`/`action_dim`,
        when set, win over `horizon`/`dim` (the policy config's)."""
        from tokenizers import Tokenizer

        settings = FastSettings.read(folder)
        bpe = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return cls(bpe, settings, settings.time_horizon or horizon, settings.action_dim or dim)

    def encode(self, chunk: np.ndarray) -> list[int]:
        """A normalised chunk [horizon, dim] -> FAST tokens (for tests, demos, benchmarks)."""
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.shape != (self.horizon, self.dim):
            raise ValueError(f"a chunk is [{self.horizon}, {self.dim}], got {list(chunk.shape)}")
        q = np.around(dct_matrix(self.horizon) @ chunk * self.settings.scale)
        values = np.maximum(q.reshape(-1) - self.settings.min_token, 0).astype(int)
        text = "".join(map(chr, values))
        tokens = list(self.bpe.encode(text).ids)
        if self.bpe.decode(tokens, skip_special_tokens=False) != text:
            raise ValueError("the FAST BPE cannot encode this chunk's coefficients")
        return tokens

    def decode(self, tokens: list[int], relaxed: bool = False) -> np.ndarray:
        """FAST tokens -> the normalised chunk, float64 [horizon, dim]."""
        coeffs = self.coefficients(tokens, relaxed)
        return dct_matrix(self.horizon).T @ (coeffs / self.settings.scale)

    def coefficients(self, tokens: list[int], relaxed: bool) -> np.ndarray:
        """The quantised DCT coefficients [horizon, dim] the tokens spell."""
        outside = [t for t in tokens if not 0 <= t < self.bpe_size]
        if outside:
            raise FastDecodeError(
                f"token {outside[0]} is not in the FAST vocabulary ({self.bpe_size} tokens)"
            )
        text = self.bpe.decode(list(tokens), skip_special_tokens=False)
        if not relaxed and _REPLACEMENT in text:
            raise FastDecodeError("the tokens' bytes are not valid UTF-8 (a split character)")
        values = np.array([ord(ch) for ch in text], dtype=np.int64) + self.settings.min_token
        expected = self.horizon * self.dim
        if relaxed:
            values = np.pad(values[:expected], (0, max(expected - values.size, 0)))
        elif values.size != expected:
            raise FastDecodeError(
                f"the tokens decode to {values.size} coefficients; a chunk of {self.horizon} "
                f"x {self.dim} needs {expected}"
            )
        return values.reshape(self.horizon, self.dim)
