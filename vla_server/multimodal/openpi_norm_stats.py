"""openpi's normalisation statistics: `assets/<asset_id>/norm_stats.json` in a checkpoint
converted by openpi's own script, `{"norm_stats": {"state": {"mean", "std", "q01", "q99"},
"actions": {...}}}` (`openpi/shared/normalize.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

NORM_STATS = "norm_stats.json"


def norm_stats_files(folder: str | Path) -> list[Path]:
    return sorted((Path(folder) / "assets").glob(f"*/{NORM_STATS}"))


def has_norm_stats(folder: str | Path) -> bool:
    return bool(norm_stats_files(folder))


def read_norm_stats(folder: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """feature ("state", "actions") -> statistic name -> float32 values."""
    files = norm_stats_files(folder)
    if len(files) != 1:
        raise ValueError(f"{folder}: expected one assets/<id>/{NORM_STATS}, found {len(files)}")
    raw = json.loads(files[0].read_text()).get("norm_stats")
    if not isinstance(raw, dict):
        raise ValueError(f"{files[0]}: no 'norm_stats' map")
    return {
        feature: {name: np.asarray(v, dtype=np.float32) for name, v in stats.items() if v}
        for feature, stats in raw.items()
    }
