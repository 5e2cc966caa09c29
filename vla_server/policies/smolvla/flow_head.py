"""SmolVLA's flow heads (LeRobot `embed_suffix` and the velocity projection).

Action tokens: `action_time_mlp_out(silu(action_time_mlp_in([action_in_proj(x_t), temb])))`
for the H noisy actions (no state token: the state is in the prefix). Time embedding:
`[sin(2 pi t / p), cos(2 pi t / p)]` over width / 2 periods `p = min_period * (max_period /
min_period) ** linspace(0, 1, width / 2)`, computed in float64 from the float32 time (LeRobot
hands it a float32 tensor), then cast to the action embedding's dtype: at t = 1 the arguments
reach 2 pi / min_period (about 1571 rad), where float32 is off by ~1e-4.

Velocity: `action_out_proj` of the expert's outputs in float32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def time_embedding(
    time: torch.Tensor, width: int, min_period: float, max_period: float
) -> torch.Tensor:
    """time [B] -> float64 [B, width]: sines then cosines."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64, device=time.device)
    period = min_period * (max_period / min_period) ** fraction
    angles = (2 * math.pi / period)[None, :] * time.to(torch.float32).to(torch.float64)[:, None]
    return torch.cat((angles.sin(), angles.cos()), dim=1)


class FlowHead(nn.Module):
    def __init__(self, width: int, max_action_dim: int, min_period: float, max_period: float):
        super().__init__()
        self.action_in_proj = nn.Linear(max_action_dim, width)
        self.action_out_proj = nn.Linear(width, max_action_dim)
        self.action_time_mlp_in = nn.Linear(2 * width, width)
        self.action_time_mlp_out = nn.Linear(width, width)
        self.periods = (min_period, max_period)

    def embed(self, x_t: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """x_t [B, H, max_action_dim] at times [B] -> action tokens [B, H, width]."""
        actions = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype))
        temb = time_embedding(time, actions.shape[-1], *self.periods).to(actions.dtype)
        fused = torch.cat((actions, temb[:, None, :].expand_as(actions)), dim=-1)
        return self.action_time_mlp_out(F.silu(self.action_time_mlp_in(fused)))

    def velocity(self, expert_out: torch.Tensor) -> torch.Tensor:
        """The expert's outputs [B, H, width] -> float32 velocity [B, H, max_action_dim]."""
        out = expert_out.to(torch.float32)
        return self.action_out_proj(out.to(self.action_out_proj.weight.dtype)).to(torch.float32)
