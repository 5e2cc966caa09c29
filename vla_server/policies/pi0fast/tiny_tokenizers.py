"""The FAST action tokenizer of a tiny pi0-FAST checkpoint, trained deterministically offline
as `physical-intelligence/fast` trains one (`UniversalActionProcessor.fit`): a byte-level BPE
(`tokenizers.ByteLevelBPETokenizer`) over the quantised DCT coefficients of smooth synthetic
action chunks, each coefficient written as `chr(q - min_token)`, the whole range of
coefficients in the initial alphabet (and, unlike the reference's `fit`, the byte-level
symbols of all ASCII bytes too, so a coefficient the training chunks never produced still
encodes, while every token still decodes to ASCII); saved as a `fast_tokenizer/` folder with
`processor_config.json` and `tokenizer.json`. The text tokenizer is the pi families' own
(`pi_common/tiny_text_tokenizer.py`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from vla_server.policies.pi0fast.fast_codec import dct_matrix

FAST_SCALE = 10.0


def synthetic_chunks(n: int, horizon: int, dim: int, seed: int) -> np.ndarray:
    """`n` smooth action chunks [horizon, dim] in [-1, 1]: a few random sinusoids each."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, horizon)[None, :, None]
    amp = rng.uniform(0.0, 0.6, size=(n, 1, dim, 3))
    freq = rng.uniform(0.2, 1.5, size=(n, 1, dim, 3))
    phase = rng.uniform(0.0, 2 * math.pi, size=(n, 1, dim, 3))
    waves = amp * np.sin(2 * math.pi * freq * t[..., None] + phase)
    return np.clip(waves.sum(-1), -1.0, 1.0)


def quantised_dct(chunks: np.ndarray, scale: float) -> np.ndarray:
    """round(dct(chunk, time, ortho) * scale) for chunks [n, H, D], as FAST quantises."""
    basis = dct_matrix(chunks.shape[1])
    return np.around(np.einsum("kt,ntd->nkd", basis, chunks) * scale)


def _ascii_symbols() -> list[str]:
    """The byte-level BPE's symbols for the bytes 0..127."""
    from tokenizers import pre_tokenizers

    level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return [level.pre_tokenize_str(chr(b))[0][0] for b in range(128)]


def write_fast_tokenizer(out: Path, horizon: int, dim: int, vocab_size: int) -> None:
    """A trained FAST tokenizer in `out` (processor_config.json + tokenizer files)."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    coeffs = quantised_dct(synthetic_chunks(3000, horizon, dim, seed=11), FAST_SCALE)
    min_token, max_token = int(coeffs.min()), int(coeffs.max())
    strings = ["".join(map(chr, (c.reshape(-1) - min_token).astype(int))) for c in coeffs]
    bpe = ByteLevelBPETokenizer()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=[chr(i) for i in range(max_token - min_token + 1)] + _ascii_symbols(),
        max_token_length=10000,
    )
    bpe._tokenizer.train_from_iterator(strings, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=bpe, clean_up_tokenization_spaces=False)
    wrapped.save_pretrained(out)
    processor = {
        "processor_class": "UniversalActionProcessor",
        "scale": FAST_SCALE,
        "vocab_size": vocab_size,
        "min_token": min_token,
        "action_dim": dim,
        "time_horizon": horizon,
    }
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2) + "\n")
