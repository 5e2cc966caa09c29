"""openpi's normalisation statistics: `assets/<asset_id>/norm_stats.json` of a checkpoint folder.

The file is `{"norm_stats": {"state": {"mean", "std", "q01", "q99"}, "actions": {...}}}`
(openpi `shared/normalize.py`; q01/q99 may be absent or null in files written before openpi
computed quantiles). Which asset: the `asset_id` of the folder's `config.json` when it names one,
else the only `assets/*/norm_stats.json` there is (openpi's conversion copies one).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vla_server.policies.pi_common.lerobot_normalizer import FeatureNormalizer, needed_stats

ASSETS = "assets"
NORM_STATS = "norm_stats.json"


def norm_stats_path(folder: str | Path) -> Path:
    """The folder's `assets/<asset_id>/norm_stats.json`; FileNotFoundError/ValueError otherwise."""
    root = Path(folder)
    config = root / "config.json"
    asset_id = json.loads(config.read_text()).get("asset_id") if config.is_file() else None
    if asset_id is not None:
        path = root / ASSETS / str(asset_id) / NORM_STATS
        if not path.is_file():
            raise FileNotFoundError(
                f"config.json names asset_id {asset_id!r}, but {path} is absent"
            )
        return path
    found = sorted((root / ASSETS).glob(f"*/{NORM_STATS}"))
    if not found:
        raise FileNotFoundError(f"{root} has no {ASSETS}/<asset_id>/{NORM_STATS}")
    if len(found) > 1:
        ids = ", ".join(p.parent.name for p in found)
        raise ValueError(f"{root} has norm stats for several assets ({ids}): set asset_id in "
                         "config.json")  # fmt: skip
    return found[0]


def read_norm_stats(folder: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """feature ("state", "actions") -> statistic name -> float32 array, for the folder's
    openpi statistics (statistics that are null are left out)."""
    path = norm_stats_path(folder)
    raw = json.loads(path.read_text())
    features = raw.get("norm_stats") if isinstance(raw, dict) else None
    if not isinstance(features, dict):
        raise ValueError(f"{path}: no 'norm_stats' object")
    return {
        feature: {
            name: np.asarray(values, dtype=np.float32)
            for name, values in stats.items()
            if values is not None
        }
        for feature, stats in features.items()
    }


OPENPI_EPS = 1e-6
OPENPI_MODES = ("MEAN_STD", "QUANTILES")


def openpi_normalizers(
    folder: str | Path, mode: str
) -> tuple[FeatureNormalizer, FeatureNormalizer]:
    """(state, actions) normalisers in `mode` from the folder's statistics, with openpi's
    arithmetic (its epsilon in every denominator, `FeatureNormalizer.eps_always`)."""
    if mode not in OPENPI_MODES:
        raise ValueError(f"openpi normalises with {' or '.join(OPENPI_MODES)}, not {mode!r}")
    stats = read_norm_stats(folder)
    out = []
    for feature in ("state", "actions"):
        values = stats.get(feature, {})
        missing = [name for name in needed_stats(mode) if name not in values]
        if missing:
            raise ValueError(f"{NORM_STATS}: {mode} for {feature!r} needs {missing[0]!r}")
        out.append(FeatureNormalizer(mode, values, OPENPI_EPS, eps_always=True))
    return out[0], out[1]
