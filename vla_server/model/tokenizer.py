"""The checkpoint's tokenizer, loaded the same way by every process."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_tokenizer(path: str | Path) -> Any:
    """`AutoTokenizer` for the folder, never running remote code: an OpenVLA folder's configs
    name some in `auto_map`, and without `trust_remote_code=False` loading would stop at an
    interactive prompt."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
