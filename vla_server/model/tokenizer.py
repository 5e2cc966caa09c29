"""Loading a checkpoint's Hugging Face tokenizer; which folder and config a family's tokenizer
comes from is the family's (`PolicyFamily.tokenizer`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def load_tokenizer(folder: str | Path, config: Any = None) -> Any:
    """`AutoTokenizer` for `folder`, never running remote code (a folder whose configs name
    some in `auto_map` would otherwise stop at an interactive prompt). `config`: the decoder
    config to hand over when the folder's `config.json` is not one transformers can read (it
    would warn and pick a generic tokenizer class over the one `tokenizer_config.json` names)."""
    from transformers import AutoTokenizer

    extra = {} if config is None else {"config": config}
    return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, **extra)


def has_tokenizer_files(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def train_byte_level_bpe(
    corpus: Iterable[str], vocab_size: int, special_tokens: Sequence[str]
) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on `corpus`, the special tokens first:
    how the project's tiny checkpoints get a real tokenizer offline (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return tok
