"""SmolVLA's action expert (LeRobot `SmolVLMWithExpertModel`, denoising path): a narrow Llama
stack over the chunk's action tokens whose layer i reads VLM layer i's prefix K/V.

* Self (joint) layer: the actions' own q/k/v (RoPE at positions `len + j`, len = the row's
  valid prefix tokens); keys = [prefix K/V ; the actions' K/V]; an action sees every valid
  prefix token and the actions up to itself (causal over the chunk).
* Cross layer: keys/values are the expert's own k_proj/v_proj applied to the VLM layer's cached
  post-RoPE K/V (flattened heads, no further RoPE); queries at positions j = 0..H-1; an action
  sees the valid prefix only.

The cross K/V depend on the prefix alone, so `ExpertContext.build` computes them once per
prefix; every velocity evaluation then reuses them (LeRobot recomputes them each step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vla_server.policies.smolvla.config import SmolVLAConfig
from vla_server.policies.smolvla.layers import DecoderLayer, RMSNorm, apply_rope, attend
from vla_server.policies.smolvla.prefix_kv import PrefixKV


@dataclass
class ExpertContext:
    """What the expert's layers attend to for a batch of rows, fixed over the denoising."""

    keys: list[torch.Tensor]  # per expert layer [B, P, kv_heads, head_dim]
    values: list[torch.Tensor]
    valid: torch.Tensor  # [B, P] bool
    lens: torch.Tensor  # [B] valid prefix tokens per row

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]


class ActionExpert(nn.Module):
    def __init__(self, c: SmolVLAConfig):
        super().__init__()
        self.self_layers = c.expert_self_layers
        self.layers = nn.ModuleList(
            DecoderLayer(c.expert, None if is_self else c.text.kv_width)
            for is_self in self.self_layers
        )
        self.norm = RMSNorm(c.expert.hidden_size, c.expert.rms_norm_eps)

    def context(self, prefix: PrefixKV) -> ExpertContext:
        """The per-layer K/V the actions attend to: the prefix's own for self layers, the
        expert's projection of them for cross layers."""
        if prefix.num_layers != len(self.layers):
            raise ValueError(f"a prefix of {prefix.num_layers} layers for {len(self.layers)}")
        keys, values = [], []
        for is_self, layer, k, v in zip(
            self.self_layers, self.layers, prefix.keys, prefix.values, strict=True
        ):
            if not is_self:
                attn = layer.self_attn
                k = attn.heads(attn.k_proj, k.flatten(-2))
                v = attn.heads(attn.v_proj, v.flatten(-2))
            keys.append(k)
            values.append(v)
        return ExpertContext(keys, values, prefix.valid, prefix.lens)

    def forward(self, h: torch.Tensor, ctx: ExpertContext) -> torch.Tensor:
        """Action tokens [B, H, width] -> the expert's normed outputs [B, H, width]."""
        horizon = h.shape[1]
        steps = torch.arange(horizon, device=h.device)[None].expand(h.shape[0], -1)
        see_prefix = ctx.valid[:, None, :].expand(-1, horizon, -1)
        causal = torch.ones(horizon, horizon, dtype=torch.bool, device=h.device).tril()
        see_joint = torch.cat((see_prefix, causal[None].expand(h.shape[0], -1, -1)), dim=-1)
        joint_positions = ctx.lens[:, None] + steps
        for n, (is_self, layer) in enumerate(zip(self.self_layers, self.layers, strict=True)):
            attn = layer.self_attn
            x = layer.normed(h)
            if is_self:
                q = apply_rope(attn.heads(attn.q_proj, x), joint_positions)
                k = apply_rope(attn.heads(attn.k_proj, x), joint_positions)
                v = attn.heads(attn.v_proj, x)
                keys = torch.cat((ctx.keys[n], k.to(ctx.keys[n].dtype)), dim=1)
                values = torch.cat((ctx.values[n], v.to(keys.dtype)), dim=1)
                out = attend(q, keys, values, see_joint)
            else:
                q = apply_rope(attn.heads(attn.q_proj, x), steps)
                out = attend(q, ctx.keys[n], ctx.values[n], see_prefix)
            h = layer.finish(h, out)
        return self.norm(h)
