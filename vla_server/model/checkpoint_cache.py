"""Checkpoints the project builds itself (the demo model, benchmark models), cached on disk."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def default_cache_dir() -> Path:
    root = os.environ.get("VLA_SERVER_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "vla-server"


def cached_folder(
    name: str, build: Callable[[Path], object], cache_dir: Path | None = None
) -> Path:
    """`cache_dir/name`, built by `build(folder)` on first use.

    The build goes to a temporary folder beside the target and is renamed into place, so a
    reader never sees a half-written checkpoint; when two processes race, one rename wins and
    the other's copy is discarded.
    """
    parent = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = parent / name
    if target.is_dir():
        return target
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=parent))
    try:
        build(tmp)
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
