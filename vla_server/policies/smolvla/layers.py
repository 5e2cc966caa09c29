"""The Llama pieces SmolVLA's text decoder and action expert share: RMSNorm, the decoder layer's
projections and MLP, RoPE and attention, with LeRobot's numerics.

* RMSNorm: `w * (x * rsqrt(mean(x^2) + eps))`, the normalisation in float32 and cast back
  before the weight (Llama's, not Gemma's `1 + w`).
* RoPE (`apply_rope`): half-split rotation at base 10000 whatever the backbone's `rope_theta`
  says, angles in float32, the result cast back to the input's dtype.
* Attention (`attend`): grouped K/V repeated per query head, scores and softmax in float32
  with masked scores set to float32's minimum (so a row with no visible key stays finite),
  the probabilities cast to V's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vla_server.policies.smolvla.config import ROPE_BASE, DecoderConfig

ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def activation(name: str):
    if name not in ACTIVATIONS:
        raise NotImplementedError(f"activation {name!r}")
    return ACTIVATIONS[name]


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.to(torch.float32)
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class Attention(nn.Module):
    """A layer's q/k/v/o projections. `kv_in`: the k/v input width (a SmolVLA cross layer
    projects the VLM's K/V, not its own hidden states)."""

    def __init__(self, c: DecoderConfig, kv_in: int | None = None):
        super().__init__()
        q_width = c.num_heads * c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, q_width, bias=False)
        self.k_proj = nn.Linear(kv_in or c.hidden_size, c.kv_width, bias=False)
        self.v_proj = nn.Linear(kv_in or c.hidden_size, c.kv_width, bias=False)
        self.o_proj = nn.Linear(q_width, c.hidden_size, bias=False)
        self.head_dim = c.head_dim

    def heads(self, proj: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """[..., in] -> [..., heads, head_dim], in the projection's dtype."""
        y = proj(x.to(proj.weight.dtype))
        return y.view(*y.shape[:-1], -1, self.head_dim)


class MLP(nn.Module):
    def __init__(self, c: DecoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.act = activation(c.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One Llama layer, split around its attention: `normed` before, `finish` after (o_proj,
    residual, post-attention norm, MLP, residual)."""

    def __init__(self, c: DecoderConfig, kv_in: int | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c, kv_in)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def normed(self, h: torch.Tensor) -> torch.Tensor:
        return self.input_layernorm(h)

    def finish(self, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        o_proj = self.self_attn.o_proj
        # LeRobot adds the residual in place into o_proj's output: the stream takes the
        # layer's dtype from here on (a float32 input becomes bfloat16 in a bfloat16 layer).
        out = o_proj(attn.to(o_proj.weight.dtype))
        h = (out + h).to(out.dtype)
        return (self.mlp(self.post_attention_layernorm(h)) + h).to(out.dtype)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = ROPE_BASE) -> torch.Tensor:
    """x [B, L, H, D] rotated at integer positions [B, L] (half-split pairs (i, i + D/2))."""
    half = x.shape[-1] // 2
    exponents = (2.0 / x.shape[-1]) * torch.arange(half, dtype=torch.float32, device=x.device)
    angles = positions[..., None].to(torch.float32) / (base**exponents)
    cos, sin = angles.cos()[..., None, :], angles.sin()[..., None, :]
    x32 = x.to(torch.float32)
    x1, x2 = x32[..., :half], x32[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """q [B, Lq, H, D], k/v [B, Lk, Hkv, D], allowed [B, Lq, Lk] bool -> [B, Lq, H * D]."""
    groups = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(groups, dim=2)
    v = v.repeat_interleave(groups, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.to(torch.float32), k.to(torch.float32))
    scores = scores * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~allowed[:, None], torch.finfo(torch.float32).min)
    probs = scores.softmax(dim=-1).to(v.dtype)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, v)
    return out.reshape(*out.shape[:2], -1)
