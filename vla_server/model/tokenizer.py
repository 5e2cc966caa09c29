"""The checkpoint's tokenizer, loaded the same way by every process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vla_server.model.config import prismatic_text_config
from vla_server.model.lerobot_config import LeRobotPolicySpec, read_lerobot_config
from vla_server.model.paligemma_config import paligemma_config
from vla_server.model.prismatic_config import PRISMATIC_MODEL_TYPES

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def load_tokenizer(path: str | Path) -> Any:
    """`AutoTokenizer` for the folder, never running remote code: an OpenVLA folder's configs
    name some in `auto_map`, and without `trust_remote_code=False` loading would stop at an
    interactive prompt. An OpenVLA folder's decoder config is handed over, so `transformers`
    does not read its `config.json` as a config of no known type (it warns, and picks a
    generic tokenizer class over the one `tokenizer_config.json` names); a LeRobot policy's
    PaliGemma config likewise, and its tokenizer comes from `tokenizer_folder`."""
    from transformers import AutoTokenizer

    extra = {}
    folder = Path(path)
    config = folder / "config.json"
    if config.is_file():
        raw = json.loads(config.read_text())
        policy = read_lerobot_config(folder)
        if raw.get("model_type") in PRISMATIC_MODEL_TYPES:
            extra["config"] = prismatic_text_config(raw)
        elif policy is not None:
            spec = LeRobotPolicySpec.from_config(policy)
            extra["config"] = paligemma_config(spec)
            folder = tokenizer_folder(folder, spec.text_tokenizer_name)
    return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, **extra)


def tokenizer_folder(folder: Path, named: str, subfolder: str | None = None) -> Path:
    """Where a LeRobot policy's tokenizer files are: `folder` (or its `subfolder`) when it holds
    tokenizer files, else `named` as a local folder (absolute or inside `folder`). A hub id
    cannot be resolved offline, so anything else is an error naming it."""
    own = folder / subfolder if subfolder else folder
    if any((own / name).is_file() for name in _TOKENIZER_FILES):
        return own
    for candidate in (Path(named), folder / named):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"{own} holds no tokenizer files and {named!r} is not a local folder (hub ids are not "
        "downloaded: put the tokenizer files into the checkpoint folder)"
    )
