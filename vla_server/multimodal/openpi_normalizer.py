"""openpi's (un)normalisation arithmetic, for checkpoints converted by openpi's own script.

openpi keeps its statistics in `assets/<asset_id>/norm_stats.json` (`read_norm_stats`) and,
unlike LeRobot, always adds its epsilon 1e-6 to the denominator, in both directions
(`openpi/transforms.py` `Normalize` / `Unnormalize`):

* mean-std (pi0): `(x - mean) / (std + 1e-6)`, inverse `x * (std + 1e-6) + mean`;
* quantiles (pi0.5): `2 (x - q01) / (q99 - q01 + 1e-6) - 1`, inverse
  `(x + 1) / 2 * (q99 - q01 + 1e-6) + q01`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vla_server.multimodal.openpi_norm_stats import read_norm_stats

OPENPI_EPS = np.float32(1e-6)
_NEEDS = {"MEAN_STD": ("mean", "std"), "QUANTILES": ("q01", "q99")}


@dataclass(frozen=True)
class OpenpiNormalizer:
    mode: str  # "MEAN_STD" or "QUANTILES"
    stats: dict[str, np.ndarray]

    def normalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        shift, scale = self._affine(x.shape[-1])
        return (x - shift) / scale if self.mode == "MEAN_STD" else (x - shift) / scale * 2 - 1

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        shift, scale = self._affine(x.shape[-1])
        return x * scale + shift if self.mode == "MEAN_STD" else (x + 1) / 2 * scale + shift

    def _affine(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        lo_name, hi_name = _NEEDS[self.mode]
        lo, hi = self.stats[lo_name][:dim], self.stats[hi_name][:dim]
        if len(lo) < dim:
            raise ValueError(f"norm_stats.json has {len(lo)} dims, the values have {dim}")
        if self.mode == "MEAN_STD":
            return lo, hi + OPENPI_EPS
        return lo, hi - lo + OPENPI_EPS


def openpi_normalizers(folder: str | Path, mode: str) -> tuple[OpenpiNormalizer, OpenpiNormalizer]:
    """(state, actions) normalisers from the folder's `norm_stats.json`, in `mode`."""
    if mode not in _NEEDS:
        raise ValueError(f"openpi normalises with {' or '.join(_NEEDS)}, not {mode!r}")
    stats = read_norm_stats(folder)
    out = []
    for feature in ("state", "actions"):
        values = stats.get(feature)
        missing = [n for n in _NEEDS[mode] if values is None or n not in values]
        if missing:
            raise ValueError(f"norm_stats.json: {mode} for {feature!r} needs {missing[0]!r}")
        assert values is not None
        out.append(OpenpiNormalizer(mode, values))
    return out[0], out[1]
