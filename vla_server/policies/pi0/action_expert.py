"""The action expert of pi0 / pi0.5: a Gemma stack over a request's suffix tokens whose layer l
attends to [the backbone's layer-l prefix K/V, read from the paged pool ; the suffix's own K/V].

openpi runs the backbone and the expert as two streams of one joint attention; the prefix
never sees the suffix, so its K/V are those of the prefill and are read, never recomputed, and
the suffix's K/V are never written to the pool. Per layer, as openpi's `PI0Pytorch`: the
expert's own norms, q/k/v projections (RoPE at the suffix positions `prefix_len + i`), one
attention, its own o_proj, residual, norm, GeGLU MLP, residual.

Norms: pi0's are Gemma's `(1 + w)` RMSNorm; pi0.5's are adaRMS (`AdaRMSNorm`), conditioned on
the time: `(scale, shift, gate) = dense(cond)`, `y = norm(x) * (1 + scale) + shift` in float32,
the residual `x + y * gate`; the final norm's gate is unused.

Masks (openpi `make_attn_mask`): pi0's suffix is [state, H actions]: the state token sees the
prefix and itself, the actions see the prefix, the state and every action; pi0.5's suffix is H
actions that see the prefix and each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vla_server.model.config import ModelConfig
from vla_server.model.layers import RMSNorm
from vla_server.model.llama import Linear, LlamaAttention, LlamaMLP, rms_norm
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.model.rotary import RotaryEmbedding


class AdaRMSNorm(nn.Module):
    """pi0.5's time-conditioned RMSNorm: returns the normed tokens and the residual gate."""

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype, device: str):
        super().__init__()
        self.dense = Linear(hidden_size, 3 * hidden_size, True, dtype, device)
        self.eps = eps

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, S, W], cond [B, W] -> (y [B, S, W], gate [B, 1, W]), both in x's dtype."""
        x32 = x.to(torch.float32)
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        scale, shift, gate = self.dense(cond)[:, None, :].chunk(3, dim=-1)
        y = normed * (1.0 + scale.to(torch.float32)) + shift.to(torch.float32)
        return y.to(x.dtype), gate.to(x.dtype)


ExpertNorm = RMSNorm | AdaRMSNorm


def _normed(
    norm: ExpertNorm, x: torch.Tensor, cond: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(norm, AdaRMSNorm):
        if cond is None:
            raise ValueError("an adaRMS expert needs its time condition")
        return norm(x, cond)
    return norm(x), None


def _residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return x + y if gate is None else x + y * gate


@dataclass
class SuffixAttention:
    """What every expert layer needs to attend for one batch of suffixes: the rows' prefix K/V
    in the pool and the additive mask over [prefix ; suffix]."""

    prefix: PagedPrefix
    mask: torch.Tensor  # [B, 1, S, P + S] additive, the pool's dtype
    positions: torch.Tensor  # [B * S] RoPE positions of the suffix tokens

    @classmethod
    def build(cls, prefix: PagedPrefix, suffix_len: int, state_token: bool) -> SuffixAttention:
        """`state_token`: the suffix starts with pi0's state token, which sees no action."""
        device = prefix.kv_index.device
        sees = torch.ones((suffix_len, suffix_len), dtype=torch.bool, device=device)
        if state_token:
            sees[0, 1:] = False
        allowed = torch.cat(
            (
                prefix.valid[:, None, None, :].expand(-1, 1, suffix_len, -1),
                sees[None, None].expand(prefix.batch_size, 1, -1, -1),
            ),
            dim=-1,
        )
        mask = torch.zeros(allowed.shape, dtype=prefix.kv_pool.dtype, device=device)
        mask.masked_fill_(~allowed, float("-inf"))
        positions = prefix.lens[:, None] + torch.arange(suffix_len, device=device)[None, :]
        return cls(prefix, mask, positions.reshape(-1))

    @property
    def batch_size(self) -> int:
        return self.prefix.batch_size

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, scale: float
    ) -> torch.Tensor:
        """q [B * S, heads, d], k/v [B * S, kv_heads, d] of the suffix -> [B * S, heads * d]."""
        b = self.batch_size
        k_prefix, v_prefix = self.prefix.kv(layer_id)
        keys = torch.cat((k_prefix, k.view(b, -1, *k.shape[1:])), dim=1)
        values = torch.cat((v_prefix, v.view(b, -1, *v.shape[1:])), dim=1)
        out = F.scaled_dot_product_attention(
            q.view(b, -1, *q.shape[1:]).transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=self.mask,
            scale=scale,
            enable_gqa=True,
        )  # [B, heads, S, d]
        return out.transpose(1, 2).reshape(q.shape[0], -1)


class ExpertLayer(nn.Module):
    def __init__(
        self, config: ModelConfig, layer_id: int, adaptive: bool, dtype: torch.dtype, device: str
    ):
        super().__init__()
        self.input_layernorm = _norm(config, adaptive, dtype, device)
        self.self_attn = LlamaAttention(config, layer_id, dtype, device)
        self.post_attention_layernorm = _norm(config, adaptive, dtype, device)
        self.mlp = LlamaMLP(config, dtype, device)

    def forward(
        self,
        h: torch.Tensor,
        cond: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attention: SuffixAttention,
    ) -> torch.Tensor:
        """h [B, S, W] -> [B, S, W]."""
        attn = self.self_attn
        y, gate = _normed(self.input_layernorm, h, cond)
        q, k, v = attn.rotated_qkv(y.reshape(-1, h.shape[-1]), cos, sin)
        out = attn.o_proj(attention.attend(q, k, v, attn.layer_id, attn.scale))
        h = _residual(h, out.view_as(h), gate)
        y, gate = _normed(self.post_attention_layernorm, h, cond)
        return _residual(h, self.mlp(y), gate)


def _norm(config: ModelConfig, adaptive: bool, dtype: torch.dtype, device: str) -> ExpertNorm:
    if adaptive:
        return AdaRMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
    return rms_norm(config, dtype, device)


class ActionExpert(nn.Module):
    """The expert's layers and final norm; `adaptive`: pi0.5's adaRMS norms."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        adaptive: bool,
        dtype: torch.dtype,
        device: str,
        max_positions: int,
    ):
        super().__init__()
        self.config = config
        self.adaptive = adaptive
        self.layers = nn.ModuleList(
            ExpertLayer(config, i, adaptive, dtype, device) for i in range(config.num_layers)
        )
        self.norm = _norm(config, adaptive, dtype, device)
        self.rotary = RotaryEmbedding(config, max_positions, device)

    def forward(
        self, h: torch.Tensor, cond: torch.Tensor | None, attention: SuffixAttention
    ) -> torch.Tensor:
        """Suffix embeddings h [B, S, W] (and pi0.5's condition [B, W]) -> the normed outputs."""
        cos, sin = self.rotary.cos_sin(attention.positions)
        for layer in self.layers:
            h = layer(h, cond, cos, sin, attention)
        return _normed(self.norm, h, cond)[0]
