"""Rotary position embeddings with the scaling variants Llama-family checkpoints use.

The inverse frequencies follow the formulas of `transformers`' RoPE initialisers for "default",
"linear", "llama3", "yarn" and "dynamic" (NTK) scaling, so our rotations match the reference
implementation. Static variants are tabulated once for every position up to the context length.

Dynamic NTK scaling depends on the sequence length. `transformers` recomputes it from the
largest position of each forward call; with a KV cache that means each request's new tokens are
rotated with the frequencies for the request's length after that forward. We do the same per
request, so a request's rotations never depend on which other requests share its batch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from vla_server.model.config import ModelConfig


def default_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _llama3_inv_freq(base: float, dim: int, rope: dict[str, Any]) -> torch.Tensor:
    inv_freq = default_inv_freq(base, dim)
    factor = rope["factor"]
    low_factor, high_factor = rope["low_freq_factor"], rope["high_freq_factor"]
    old_context_len = rope["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    low_wavelen, high_wavelen = old_context_len / low_factor, old_context_len / high_factor
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_factor) / (high_factor - low_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(
    base: float, dim: int, rope: dict[str, Any], max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    original = rope["original_max_position_embeddings"]
    factor = rope.get("factor") or max_position_embeddings / original
    attention_factor = rope.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = rope.get("beta_fast") or 32
    beta_slow = rope.get("beta_slow") or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoids a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp
    interpolation = 1 - extrapolation
    inv_freq = (1.0 / (factor * pos_freqs)) * interpolation + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


def static_inv_freq(config: ModelConfig) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim / 2] and the cos/sin scale for the config's RoPE variant."""
    base, dim, rope = config.rope_theta, config.head_dim, config.rope_scaling or {}
    rope_type = rope.get("rope_type", "default")
    if rope_type == "linear":
        return default_inv_freq(base, dim) / rope["factor"], 1.0
    if rope_type == "llama3":
        return _llama3_inv_freq(base, dim, rope), 1.0
    if rope_type == "yarn":
        return _yarn_inv_freq(base, dim, rope, config.max_position_embeddings)
    return default_inv_freq(base, dim), 1.0  # "default", and "dynamic" within the original length


def dynamic_ntk_inv_freq(config: ModelConfig, seq_lens: torch.Tensor) -> torch.Tensor:
    """Per-row inverse frequencies [n, head_dim / 2] for dynamic NTK scaling at `seq_lens` [n]."""
    dim, max_pos = config.head_dim, config.max_position_embeddings
    factor = config.rope_scaling["factor"]  # type: ignore[index]
    # The base is computed in float64 as the reference does with Python floats.
    seq_len = seq_lens.to(torch.float64).clamp(min=max_pos)
    base = config.rope_theta * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=seq_lens.device).float() / dim
    return 1.0 / (base.to(torch.float32)[:, None] ** exponents[None, :])


class RotaryEmbedding:
    """Turns positions into cos/sin [num_tokens, head_dim / 2] and rotates q/k with them."""

    def __init__(self, config: ModelConfig, max_positions: int, device: torch.device | str):
        self.config = config
        self.is_dynamic = (config.rope_scaling or {}).get("rope_type") == "dynamic"
        inv_freq, self.scale = static_inv_freq(config)
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        self.cos_table = (freqs.cos() * self.scale).to(device)
        self.sin_table = (freqs.sin() * self.scale).to(device)

    def cos_sin(
        self, positions: torch.Tensor, token_seq_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for `positions` [num_tokens]. For dynamic NTK scaling, `token_seq_lens`
        [num_tokens] holds each token's request length; leave it None while no request is
        longer than max_position_embeddings (the scaling is then the identity)."""
        if self.is_dynamic and token_seq_lens is not None:
            inv_freq = dynamic_ntk_inv_freq(self.config, token_seq_lens)
            freqs = positions.to(torch.float32)[:, None] * inv_freq
            return freqs.cos(), freqs.sin()
        return self.cos_table[positions], self.sin_table[positions]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x [num_tokens, heads, head_dim]; cos/sin: [num_tokens, head_dim / 2]."""
    cos = cos.to(x.dtype)[:, None, :]
    sin = sin.to(x.dtype)[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
