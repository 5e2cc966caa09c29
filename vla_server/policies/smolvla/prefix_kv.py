"""`PrefixKV`: the per-layer K/V of a batch of SmolVLA prefixes, the unit a server caches.

Each row keeps only its valid prefix tokens (LeRobot's masked ones, such as text padding or an
empty camera's image, are dropped: no valid token ever attends to them and positions count
valid tokens only), left-aligned and padded on the right to the batch's longest row; `valid`
marks the real entries. K is post-RoPE, as LeRobot caches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PrefixKV:
    keys: list[torch.Tensor]  # per VLM layer [B, P, kv_heads, head_dim], post-RoPE
    values: list[torch.Tensor]  # per VLM layer [B, P, kv_heads, head_dim]
    valid: torch.Tensor  # [B, P] bool: a real prefix token (not batch padding)

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]

    @property
    def num_layers(self) -> int:
        return len(self.keys)

    @property
    def lens(self) -> torch.Tensor:
        """[B] int64: each row's number of prefix tokens (where its actions' positions start)."""
        return self.valid.sum(dim=-1)

    def row(self, i: int) -> PrefixKV:
        """Row i alone, cut to its own tokens."""
        keep = self.valid[i]
        return PrefixKV(
            [k[i, keep][None] for k in self.keys],
            [v[i, keep][None] for v in self.values],
            keep[keep][None],
        )

    def layer_tokens(self, i: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row i's K and V of `layer` [len_i, kv_heads, head_dim]: what a KV page stores."""
        keep = self.valid[i]
        return self.keys[layer][i, keep], self.values[layer][i, keep]

    @staticmethod
    def batch(rows: Sequence[PrefixKV]) -> PrefixKV:
        """Rows (each of batch 1 or more) stacked, right-padded to the longest."""
        length = max(r.valid.shape[1] for r in rows)

        def pad(t: torch.Tensor, value: float | bool = 0) -> torch.Tensor:
            extra = length - t.shape[1]
            spec = (0, 0) * (t.dim() - 2) + (0, extra)
            return F.pad(t, spec, value=value)

        layers = range(rows[0].num_layers)
        return PrefixKV(
            [torch.cat([pad(r.keys[n]) for r in rows]) for n in layers],
            [torch.cat([pad(r.values[n]) for r in rows]) for n in layers],
            torch.cat([pad(r.valid, False) for r in rows]),
        )
