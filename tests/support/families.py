"""Checkpoint folders as the node reads them: through their policy family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vla_server.policies.registry import detect


def family_tokenizer(folder: str | Path) -> Any:
    """The tokenizer every process of a node on `folder` uses."""
    return detect(folder).tokenizer()
