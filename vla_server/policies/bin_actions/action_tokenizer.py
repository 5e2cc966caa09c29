"""OpenVLA-style action tokens: bin token ids <-> continuous, un-normalised action vectors.

The mapping is OpenVLA's (``prismatic/vla/action_tokenizer.py`` and ``predict_action`` in
``modeling_prismatic.py``), with ``end = first + n_bins`` in the role of OpenVLA's
``vocab_size`` (they coincide when the bins are the last ``n_bins`` ids of the vocabulary):

* ``bins = linspace(min_action, max_action, n_bins)``, ``centers = (bins[:-1] + bins[1:]) / 2``;
* decode: ``centers[clip(end - token_id - 1, 0, n_bins - 2)]`` (the highest id is the lowest
  bin), then per dimension, where ``mask``:
  ``(a - min_action) / (max_action - min_action) * (q99 - q01) + q01`` -- for the [-1, 1] range
  exactly OpenVLA's ``0.5 * (a + 1) * (q99 - q01) + q01``; elsewhere ``a`` unchanged;
* encode (for tests and demo clients): normalise with q01/q99 where ``mask``, clip to the range,
  ``token_id = end - digitize(a, bins)``.

Unlike OpenVLA, a token outside the bins, an unknown ``unnorm_key`` and statistics that yield a
non-finite action raise :class:`ActionDecodeError` instead of being clipped or passed on: a
wrong command must never leave the node looking like a valid one.

The padded-vocabulary trap: OpenVLA counts back from the *tokenizer's base* vocabulary (32000
for Llama 2), not from ``len(tokenizer)`` (32001: an added ``<PAD>``) nor from the model's
padded embedding rows (32064); any of the latter shifts every bin. ``from_folder`` therefore
checks ``tokenizer_vocab_size`` against the folder's ``tokenizer.json`` and against the ids the
caller reserves (special/added tokens), and refuses a mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_server.policies.bin_actions.action_config import ActionSpec, NormStats, read_action_spec


class ActionDecodeError(ValueError):
    """A request-level action failure: report it in the chunk and the finish reason."""


class ActionTokenizer:
    def __init__(
        self, spec: ActionSpec, tokenizer_vocab_size: int, total_vocab_size: int | None = None
    ):
        # Default bins end the base vocabulary (OpenVLA); explicit bins may be added tokens,
        # which lie beyond it but within the tokenizer's total size (len(tokenizer)).
        first = spec.first_bin_token_id
        if first is None:
            first = tokenizer_vocab_size - spec.n_bins
        limit = max(tokenizer_vocab_size, total_vocab_size or 0)
        if first < 0 or first + spec.n_bins > limit:
            raise ValueError(
                f"{spec.source}: action bins {first}..{first + spec.n_bins - 1} do not fit in "
                f"the tokenizer vocabulary of {limit} ids"
            )
        self.spec = spec
        self.first = first
        self.end = first + spec.n_bins  # OpenVLA's "vocab_size" in its id <-> bin formulas
        self._bins = np.linspace(spec.min_action, spec.max_action, spec.n_bins)
        self._centers = (self._bins[:-1] + self._bins[1:]) / 2.0

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        tokenizer_vocab_size: int,
        *,
        reserved_token_ids: Iterable[int] = (),
        total_vocab_size: int | None = None,
    ) -> ActionTokenizer | None:
        """The checkpoint's action tokenizer, or None when it declares no action tokens.

        ``tokenizer_vocab_size``: the tokenizer's base vocabulary size (HF ``tokenizer.vocab_size``,
        which excludes added tokens) -- never the model's padded embedding size.
        ``total_vocab_size``: ``len(tokenizer)``, the bound for bins the checkpoint names
        explicitly (``bin_token_ids: {"first": id}``), which may be added tokens.
        ``reserved_token_ids``: ids that must not be bins (special and added tokens, the image
        token); an overlap means the bins were counted from the wrong vocabulary size.
        """
        spec = read_action_spec(folder)
        if spec is None:
            return None
        _check_base_vocab(Path(folder), tokenizer_vocab_size)
        tokenizer = cls(spec, tokenizer_vocab_size, total_vocab_size)
        clashes = sorted(t for t in set(reserved_token_ids) if tokenizer.is_bin(t))
        if clashes:
            raise ValueError(
                f"action bins {tokenizer.first}..{tokenizer.end - 1} include reserved token ids "
                f"{clashes[:8]}: tokenizer_vocab_size={tokenizer_vocab_size} is probably "
                "len(tokenizer) or the model's padded vocabulary, not tokenizer.vocab_size"
            )
        _check_declared_vocab(spec, tokenizer_vocab_size)
        return tokenizer

    @property
    def action_dim(self) -> int:
        return self.spec.action_dim

    @property
    def n_bins(self) -> int:
        return self.spec.n_bins

    def bin_token_ids(self) -> range:
        return range(self.first, self.end)

    def is_bin(self, token_id: int) -> bool:
        return self.first <= token_id < self.end

    def unnorm_keys(self) -> list[str]:
        return sorted(self.spec.norm_stats)

    def resolve_unnorm_key(self, unnorm_key: str | None) -> str | None:
        """The statistics key a request will use; raises for a missing or unknown key.

        None is accepted when there is exactly one key (it is used) or none at all (actions are
        then returned in the bin range, un-normalised by nothing).
        """
        keys = self.unnorm_keys()
        if unnorm_key is None:
            if len(keys) > 1:
                raise ActionDecodeError(f"unnorm_key is required; known keys: {keys}")
            return keys[0] if keys else None
        if unnorm_key not in self.spec.norm_stats:
            raise ActionDecodeError(f"unknown unnorm_key {unnorm_key!r}; known keys: {keys}")
        return unnorm_key

    def decode(self, token_ids: Sequence[int], unnorm_key: str | None) -> np.ndarray:
        """One action (``action_dim`` token ids) -> float64 ``[action_dim]`` in robot units."""
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.shape != (self.action_dim,):
            raise ActionDecodeError(
                f"an action needs {self.action_dim} tokens, got {list(ids.shape)}"
            )
        outside = np.flatnonzero((ids < self.first) | (ids >= self.end))
        if outside.size:
            pos = int(outside[0])
            raise ActionDecodeError(
                f"token {int(ids[pos])} at position {pos} of the action is not an action bin "
                f"(bins are ids {self.first}..{self.end - 1})"
            )
        normalized = self._centers[np.clip(self.end - ids - 1, 0, self.n_bins - 2)]
        key = self.resolve_unnorm_key(unnorm_key)
        if key is None:
            return normalized
        return self._unnormalize(normalized, key)

    def encode(self, actions: np.ndarray | Sequence[float], unnorm_key: str | None) -> list[int]:
        """Actions ``[action_dim]`` or ``[n, action_dim]`` in robot units -> flat bin token ids."""
        values = np.asarray(actions, dtype=np.float64)
        if values.ndim == 0 or values.shape[-1] != self.action_dim:
            raise ActionDecodeError(f"actions need a last dimension of {self.action_dim}")
        key = self.resolve_unnorm_key(unnorm_key)
        if key is not None:
            values = self._normalize(values.reshape(-1, self.action_dim), key)
        lo, hi = self.spec.min_action, self.spec.max_action
        digitized = np.digitize(np.clip(values, lo, hi), self._bins)
        return (self.end - digitized).reshape(-1).tolist()

    def allowed_mask(self, model_vocab_size: int) -> torch.Tensor:
        """bool ``[model_vocab_size]``, True exactly at the bin ids (for constrained sampling)."""
        if model_vocab_size < self.end:
            raise ValueError(
                f"model vocabulary of {model_vocab_size} ids ends before the action bins "
                f"({self.first}..{self.end - 1})"
            )
        mask = torch.zeros(model_vocab_size, dtype=torch.bool)
        mask[self.first : self.end] = True
        return mask

    def _unnormalize(self, normalized: np.ndarray, key: str) -> np.ndarray:
        stats = self.spec.norm_stats[key]
        lo, hi = self.spec.min_action, self.spec.max_action
        scaled = (normalized - lo) / (hi - lo) * (stats.q99 - stats.q01) + stats.q01
        actions = np.where(stats.mask, scaled, normalized)
        _check_finite(actions, key, stats)
        return actions

    def _normalize(self, actions: np.ndarray, key: str) -> np.ndarray:
        stats = self.spec.norm_stats[key]
        _check_finite(np.where(stats.mask, stats.q99 - stats.q01, 0.0), key, stats)
        lo, hi = self.spec.min_action, self.spec.max_action
        span = stats.q99 - stats.q01
        # A constant dimension (q99 == q01) decodes to q01 from any bin; pick the middle one.
        fraction = np.divide(
            actions - stats.q01, span, out=np.full_like(actions, 0.5), where=span != 0
        )
        return np.where(stats.mask, lo + fraction * (hi - lo), actions)


def _check_finite(values: np.ndarray, key: str, stats: NormStats) -> None:
    bad = np.flatnonzero(~np.isfinite(values).reshape(-1, stats.q01.shape[0]).all(axis=0))
    if bad.size:
        raise ActionDecodeError(
            f"unnorm statistics {key!r} give a non-finite action in dims {bad.tolist()} "
            "(q01/q99 NaN or infinite)"
        )


def _check_base_vocab(folder: Path, tokenizer_vocab_size: int) -> None:
    """Refuse a vocabulary size that disagrees with the folder's own ``tokenizer.json``."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return
    vocab = json.loads(path.read_text()).get("model", {}).get("vocab")
    if vocab is None:
        return
    if len(vocab) != tokenizer_vocab_size:
        raise ValueError(
            f"tokenizer_vocab_size={tokenizer_vocab_size} but {path} has a base vocabulary of "
            f"{len(vocab)} ids: pass tokenizer.vocab_size, not len(tokenizer) (added tokens) "
            "or the model's padded embedding size"
        )


def _check_declared_vocab(spec: ActionSpec, tokenizer_vocab_size: int) -> None:
    """OpenVLA counts bins back from text_config.vocab_size - pad_to_multiple_of; a tokenizer of
    another size would put every action in the wrong bin."""
    if spec.declared_vocab is not None and spec.declared_vocab != tokenizer_vocab_size:
        raise ValueError(
            f"{spec.source}: text_config.vocab_size - pad_to_multiple_of = {spec.declared_vocab} "
            f"ids, but the tokenizer's base vocabulary has {tokenizer_vocab_size}: the action "
            "bins would be shifted"
        )


def load_bin_actions(folder: str | Path, tokenizer: Any) -> ActionTokenizer | None:
    """The folder's bin action tokenizer for its HF `tokenizer` (None when it declares no action
    tokens): the one way every process loads it, so they all count bins from the same
    vocabulary."""
    return ActionTokenizer.from_folder(
        folder,
        tokenizer.vocab_size,
        reserved_token_ids=tokenizer.all_special_ids,
        total_vocab_size=len(tokenizer),
    )
