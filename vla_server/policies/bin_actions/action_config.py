"""Read a checkpoint's action-token declaration: ``action_tokenizer.json``, else OpenVLA's config.

``action_tokenizer.json``::

    {"n_bins": 256, "action_dim": 7, "min_action": -1.0, "max_action": 1.0,
     "bin_token_ids": null | {"first": <lowest bin id>},
     "norm_stats": {"<unnorm_key>": {"action": {"q01": [...], "q99": [...], "mask": [...]}}}}

``bin_token_ids: null`` means the last ``n_bins`` ids of the tokenizer's base vocabulary.
OpenVLA-style ``config.json``: ``norm_stats`` as above (other statistics ignored),
``n_action_bins`` (default 256), bin range [-1, 1], the last ``n_bins`` ids. ``mask`` defaults
to all True. Statistics are kept as given, NaN included: bad numbers are a decode-time error
for requests that use them, not a reason to refuse the whole model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ACTION_TOKENIZER_FILE = "action_tokenizer.json"
OPENVLA_CONFIG_FILE = "config.json"
OPENVLA_DEFAULT_BINS = 256


@dataclass(frozen=True)
class NormStats:
    q01: np.ndarray  # float64 [action_dim]
    q99: np.ndarray  # float64 [action_dim]
    mask: np.ndarray  # bool [action_dim]: False leaves that dimension normalised (e.g. gripper)


@dataclass(frozen=True)
class ActionSpec:
    n_bins: int
    action_dim: int
    min_action: float
    max_action: float
    first_bin_token_id: int | None  # None: the last n_bins ids of the base vocabulary
    norm_stats: dict[str, NormStats]
    source: str  # the file it was read from, for error messages
    # OpenVLA: text_config.vocab_size - pad_to_multiple_of, the vocabulary its bins count back
    # from (predict_action's `vocab_size`); None when the config does not declare one.
    declared_vocab: int | None = None


def read_action_spec(folder: str | Path) -> ActionSpec | None:
    """The folder's action declaration, or None when the checkpoint declares no action tokens."""
    folder = Path(folder)
    own = folder / ACTION_TOKENIZER_FILE
    if own.is_file():
        return _spec_from_action_tokenizer_json(json.loads(own.read_text()), str(own))
    config = folder / OPENVLA_CONFIG_FILE
    if config.is_file():
        raw = json.loads(config.read_text())
        if isinstance(raw.get("norm_stats"), dict):
            return _spec_from_openvla_config(raw, str(config))
    return None


def _spec_from_action_tokenizer_json(raw: dict[str, Any], source: str) -> ActionSpec:
    action_dim = _positive_int(raw.get("action_dim"), "action_dim", source)
    bin_ids = raw.get("bin_token_ids")
    if bin_ids is not None and not (isinstance(bin_ids, dict) and set(bin_ids) == {"first"}):
        raise ValueError(f'{source}: bin_token_ids must be null or {{"first": <id>}}')
    first = None if bin_ids is None else _non_negative_int(bin_ids["first"], "first", source)
    if not isinstance(raw.get("norm_stats"), dict):
        raise ValueError(f"{source}: norm_stats must be an object (may be empty)")
    return _checked_spec(
        ActionSpec(
            n_bins=_positive_int(raw.get("n_bins"), "n_bins", source),
            action_dim=action_dim,
            min_action=float(raw.get("min_action", -1.0)),
            max_action=float(raw.get("max_action", 1.0)),
            first_bin_token_id=first,
            norm_stats=_parse_norm_stats(raw["norm_stats"], action_dim, source),
            source=source,
        )
    )


def _spec_from_openvla_config(raw: dict[str, Any], source: str) -> ActionSpec:
    dims = {len(entry.get("action", {}).get("q01", [])) for entry in raw["norm_stats"].values()}
    if len(dims) != 1 or 0 in dims:
        raise ValueError(f"{source}: norm_stats keys disagree on the action dimension ({dims})")
    action_dim = dims.pop()
    return _checked_spec(
        ActionSpec(
            n_bins=_positive_int(raw.get("n_action_bins", OPENVLA_DEFAULT_BINS), "bins", source),
            action_dim=action_dim,
            min_action=-1.0,
            max_action=1.0,
            first_bin_token_id=None,
            norm_stats=_parse_norm_stats(raw["norm_stats"], action_dim, source),
            source=source,
            declared_vocab=_declared_vocab(raw),
        )
    )


def _declared_vocab(raw: dict[str, Any]) -> int | None:
    padded = (raw.get("text_config") or {}).get("vocab_size")
    if not isinstance(padded, int):
        return None
    return padded - int(raw.get("pad_to_multiple_of") or 0)


def _checked_spec(spec: ActionSpec) -> ActionSpec:
    if spec.n_bins < 2:
        raise ValueError(f"{spec.source}: n_bins must be at least 2 (bin centres need two edges)")
    if not spec.min_action < spec.max_action:
        raise ValueError(f"{spec.source}: min_action must be below max_action")
    return spec


def _parse_norm_stats(raw: dict[str, Any], action_dim: int, source: str) -> dict[str, NormStats]:
    stats = {}
    for key, entry in raw.items():
        action = entry.get("action") if isinstance(entry, dict) else None
        if not isinstance(action, dict) or "q01" not in action or "q99" not in action:
            raise ValueError(f"{source}: norm_stats[{key!r}] needs action.q01 and action.q99")
        where = f"{source}: norm_stats[{key!r}].action"
        mask = action.get("mask", [True] * action_dim)
        stats[key] = NormStats(
            q01=_vector(action["q01"], action_dim, f"{where}.q01", np.float64),
            q99=_vector(action["q99"], action_dim, f"{where}.q99", np.float64),
            mask=_vector(mask, action_dim, f"{where}.mask", bool),
        )
    return stats


def _vector(values: Any, length: int, where: str, dtype: type) -> np.ndarray:
    array = np.asarray(values, dtype=dtype)
    if array.shape != (length,):
        raise ValueError(f"{where} has shape {list(array.shape)}, expected [{length}]")
    return array


def _positive_int(value: Any, name: str, source: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{source}: {name} must be a positive integer, got {value!r}")
    return value


def _non_negative_int(value: Any, name: str, source: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{source}: bin_token_ids.{name} must be an integer >= 0, got {value!r}")
    return value
