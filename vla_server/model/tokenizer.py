"""The checkpoint's tokenizer, loaded the same way by every process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vla_server.model.config import prismatic_text_config
from vla_server.model.prismatic_config import PRISMATIC_MODEL_TYPES


def load_tokenizer(path: str | Path) -> Any:
    """`AutoTokenizer` for the folder, never running remote code: an OpenVLA folder's configs
    name some in `auto_map`, and without `trust_remote_code=False` loading would stop at an
    interactive prompt. An OpenVLA folder's decoder config is handed over, so `transformers`
    does not read its `config.json` as a config of no known type (it warns, and picks a
    generic tokenizer class over the one `tokenizer_config.json` names)."""
    from transformers import AutoTokenizer

    extra = {}
    config = Path(path) / "config.json"
    if config.is_file():
        raw = json.loads(config.read_text())
        if raw.get("model_type") in PRISMATIC_MODEL_TYPES:
            extra["config"] = prismatic_text_config(raw)
    return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, **extra)
