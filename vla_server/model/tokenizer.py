"""Loading a checkpoint's Hugging Face tokenizer; which folder and config a family's tokenizer
comes from is the family's (`PolicyFamily.tokenizer`)."""

from __future__ import annotations

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
