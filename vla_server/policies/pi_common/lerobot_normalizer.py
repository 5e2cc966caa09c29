"""A LeRobot policy's normalisation statistics and its (un)normaliser arithmetic.

LeRobot saves its processor pipelines as `policy_preprocessor.json` and
`policy_postprocessor.json`: lists of steps (`registry_name`, `config`, `state_file`). The
`normalizer_processor` step of the first and the `unnormalizer_processor` step of the second
name a safetensors file of flat statistics (`"observation.state.q01"`, `"action.q99"`, ...) and
map feature types to modes (`config.norm_map`, e.g. `{"STATE": "QUANTILES"}`; the policy's
`normalization_mapping` when the step has none). The formulas are LeRobot's
(`processor/normalize_processor.py`), in float32 as LeRobot computes them:

* MEAN_STD: `(x - mean) / (std + eps)`, inverse `x * std + mean`;
* MIN_MAX / QUANTILES / QUANTILE10 over (lo, hi) = (min, max) / (q01, q99) / (q10, q90):
  `2 (x - lo) / d - 1`, inverse `(x + 1) d / 2 + lo`, with `d = hi - lo`, or `eps` where that
  is 0;
* IDENTITY, or a feature without statistics: unchanged.

openpi's own statistics (`openpi_norm_stats.py`) use the same arithmetic with its epsilon 1e-6
added to every denominator, in both directions (`eps_always`): `x * (std + eps) + mean`,
`d = hi - lo + eps` (openpi `transforms.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_server.policies.pi_common.lerobot_features import ACTION_KEY, STATE_KEY

PREPROCESSOR = "policy_preprocessor.json"
POSTPROCESSOR = "policy_postprocessor.json"
_BOUNDS = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}
_MODES = ("IDENTITY", "MEAN_STD", *_BOUNDS)


@dataclass(frozen=True)
class FeatureNormalizer:
    """One feature's (un)normalisation: its mode and float32 statistics."""

    mode: str
    stats: dict[str, np.ndarray]
    eps: float = 1e-8
    eps_always: bool = False  # openpi: eps in every denominator, not only where it is 0

    def normalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if self.mode == "IDENTITY":
            return x
        if self.mode == "MEAN_STD":
            return (x - self.stats["mean"]) / (self.stats["std"] + np.float32(self.eps))
        lo, denom = self._range()
        return np.float32(2.0) * (x - lo) / denom - np.float32(1.0)

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if self.mode == "IDENTITY":
            return x
        if self.mode == "MEAN_STD":
            std = self.stats["std"] + np.float32(self.eps) if self.eps_always else self.stats["std"]
            return x * std + self.stats["mean"]
        lo, denom = self._range()
        return (x + np.float32(1.0)) * denom / np.float32(2.0) + lo

    def _range(self) -> tuple[np.ndarray, np.ndarray]:
        lo_name, hi_name = _BOUNDS[self.mode]
        lo, hi = self.stats[lo_name], self.stats[hi_name]
        denom = hi - lo
        if self.eps_always:
            return lo, (denom + np.float32(self.eps)).astype(np.float32)
        return lo, np.where(denom == 0, np.float32(self.eps), denom).astype(np.float32)


IDENTITY = FeatureNormalizer("IDENTITY", {})


def feature_normalizer(
    folder: Path, pipeline: str, step_name: str, feature: str, feature_type: str,
    default_modes: dict[str, str],
) -> FeatureNormalizer:  # fmt: skip
    """The normaliser of `feature` (of `feature_type`, e.g. "STATE") in the folder's `pipeline`
    file, from its `step_name` step; IDENTITY when the pipeline, the step or the statistics are
    absent (a policy saved without statistics: LeRobot then passes values through)."""
    step = _step(folder / pipeline, step_name)
    if step is None:
        return IDENTITY
    config = step.get("config") or {}
    mode = (config.get("norm_map") or default_modes).get(feature_type, "IDENTITY")
    if mode not in _MODES:
        raise ValueError(f"{pipeline}: normalisation mode {mode!r} is not supported ({_MODES})")
    stats = _stats(folder, step.get("state_file"), feature)
    if mode == "IDENTITY" or not stats:
        return IDENTITY
    missing = [name for name in needed_stats(mode) if name not in stats]
    if missing:
        raise ValueError(f"{pipeline}: {mode} for {feature} needs {feature}.{missing[0]}")
    return FeatureNormalizer(mode, stats, float(config.get("eps", 1e-8)))


def needed_stats(mode: str) -> tuple[str, ...]:
    """The statistics a (non-identity) mode reads."""
    return ("mean", "std") if mode == "MEAN_STD" else _BOUNDS[mode]


def policy_normalizers(
    folder: Path, default_modes: dict[str, str]
) -> tuple[FeatureNormalizer, FeatureNormalizer]:
    """A LeRobot policy folder's (state normaliser, action unnormaliser)."""
    state = feature_normalizer(folder, PREPROCESSOR, "normalizer_processor", STATE_KEY, "STATE",
                               default_modes)  # fmt: skip
    action = feature_normalizer(folder, POSTPROCESSOR, "unnormalizer_processor", ACTION_KEY,
                                "ACTION", default_modes)  # fmt: skip
    return state, action


def _step(path: Path, step_name: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    steps = json.loads(path.read_text()).get("steps") or []
    return next((s for s in steps if s.get("registry_name") == step_name), None)


def _stats(folder: Path, state_file: str | None, feature: str) -> dict[str, np.ndarray]:
    if not state_file or not (folder / state_file).is_file():
        return {}
    from safetensors.numpy import load_file

    prefix = feature + "."
    return {
        name[len(prefix) :]: np.asarray(value, dtype=np.float32)
        for name, value in load_file(str(folder / state_file)).items()
        if name.startswith(prefix) and "." not in name[len(prefix) :]
    }
