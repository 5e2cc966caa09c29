"""The policy processors LeRobot saves next to a checkpoint, as far as inference needs them.

`policy_preprocessor.json` lists steps by `registry_name`; SmolVLA's are rename, batch,
`smolvla_new_line_processor`, `tokenizer_processor` (max_length, padding, padding_side,
truncation), device and `normalizer_processor` (norm_map, eps, and a `state_file` of
statistics `<key>.<stat>`). `policy_postprocessor.json` holds the `unnormalizer_processor`.

Normalisation per feature type (`norm_map`): IDENTITY; MEAN_STD `(x - mean) / (std + eps)`,
inverse `x * std + mean`; MIN_MAX to [-1, 1]; QUANTILES (q01, q99) and QUANTILE10 (q10, q90)
likewise; a range of 0 is replaced by eps. A key without statistics passes unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

PREPROCESSOR = "policy_preprocessor.json"
POSTPROCESSOR = "policy_postprocessor.json"
RANGES = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}


@dataclass
class Normalizer:
    modes: dict[str, str]  # feature key -> normalisation mode
    stats: dict[str, dict[str, torch.Tensor]]  # feature key -> stat name -> tensor
    eps: float = 1e-8

    def __call__(self, key: str, x: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
        mode = self.modes.get(key, "IDENTITY")
        stats = self.stats.get(key)
        if mode == "IDENTITY" or stats is None:
            return x
        stats = {k: v.to(device=x.device, dtype=x.dtype) for k, v in stats.items()}
        if mode == "MEAN_STD":
            mean, std = stats["mean"], stats["std"]
            return x * std + mean if inverse else (x - mean) / (std + self.eps)
        if mode not in RANGES:
            raise ValueError(f"unsupported normalisation mode {mode!r} for {key}")
        low, high = (stats[name] for name in RANGES[mode])
        span = high - low
        span = torch.where(span == 0, torch.full_like(span, self.eps), span)
        return (x + 1) / 2 * span + low if inverse else 2 * (x - low) / span - 1


@dataclass
class TokenizerSettings:
    max_length: int
    padding: str
    padding_side: str = "right"
    truncation: bool = True


@dataclass
class ProcessorFiles:
    rename_map: dict[str, str] = field(default_factory=dict)
    newline: bool = True
    tokenizer: TokenizerSettings | None = None
    normalizer: Normalizer | None = None
    unnormalizer: Normalizer | None = None


def read_processor_files(folder: str | Path) -> ProcessorFiles:
    """What `folder`'s processor files say; missing files leave their parts None."""
    folder = Path(folder)
    files = ProcessorFiles(newline=False)
    for step in _steps(folder / PREPROCESSOR):
        config = step.get("config", {})
        name = step.get("registry_name")
        if name == "rename_observations_processor":
            files.rename_map = dict(config.get("rename_map", {}))
        elif name == "smolvla_new_line_processor":
            files.newline = True
        elif name == "tokenizer_processor":
            files.tokenizer = TokenizerSettings(
                max_length=config.get("max_length", 512),
                padding=config.get("padding", "max_length"),
                padding_side=config.get("padding_side", "right"),
                truncation=config.get("truncation", True),
            )
        elif name == "normalizer_processor":
            files.normalizer = _normalizer(folder, step)
    for step in _steps(folder / POSTPROCESSOR):
        if step.get("registry_name") == "unnormalizer_processor":
            files.unnormalizer = _normalizer(folder, step)
    return files


def _steps(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("steps", [])


def _normalizer(folder: Path, step: dict[str, Any]) -> Normalizer:
    config = step.get("config", {})
    norm_map = config.get("norm_map", {})
    modes = {
        key: norm_map.get(feature["type"], "IDENTITY")
        for key, feature in config.get("features", {}).items()
    }
    stats: dict[str, dict[str, torch.Tensor]] = {}
    if step.get("state_file"):
        for name, tensor in load_file(str(folder / step["state_file"])).items():
            key, stat = name.rsplit(".", 1)
            stats.setdefault(key, {})[stat] = tensor
    return Normalizer(modes, stats, config.get("eps", 1e-8))
