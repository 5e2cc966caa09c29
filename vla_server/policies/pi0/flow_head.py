"""The flow heads of pi0 / pi0.5: noisy actions, time (and pi0's state) in as suffix
embeddings for the action expert; the expert's outputs out as a velocity.

Time embedding (openpi `posemb_sincos`, LeRobot `create_sinusoidal_pos_embedding`):
`[sin(2 pi t / p), cos(2 pi t / p)]` over `W / 2` periods `p = min_period *
(max_period / min_period) ** linspace(0, 1, W / 2)`, computed in float64 as both do, then
float32. The arguments reach 2 pi / min_period (about 1571 rad at t = 1), where a float32
computation is off by ~1e-4, so the precision is part of the model.

* pi0 (`Pi0Head`): suffix = [state_proj(state), action_time_mlp_out(silu(action_time_mlp_in(
  [action_in_proj(x_t), t_emb])))] for the H actions; no condition.
* pi0.5 (`Pi05Head`): suffix = action_in_proj(x_t); condition for the adaRMS norms
  `silu(time_mlp_out(silu(time_mlp_in(t_emb))))`.

Both: velocity = action_out_proj(the expert's last H outputs), in float32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vla_server.model.llama import Linear


def time_frequencies(
    width: int, min_period: float, max_period: float, device: torch.device | str
) -> torch.Tensor:
    """float64 [width / 2] angular frequencies 2 pi / p of the sinusoidal time embedding."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64, device=device)
    period = min_period * (max_period / min_period) ** fraction
    return 1.0 / period * 2 * math.pi


def time_embedding(time: torch.Tensor, frequencies: torch.Tensor) -> torch.Tensor:
    """time [B] -> float32 [B, 2 * len(frequencies)]: sines then cosines, computed in float64."""
    angles = frequencies[None, :] * time.to(torch.float64)[:, None]
    return torch.cat((angles.sin(), angles.cos()), dim=-1).to(torch.float32)


class Pi0Head(nn.Module):
    has_state_token = True

    def __init__(
        self, width: int, max_state_dim: int, max_action_dim: int, dtype: torch.dtype, device: str
    ):
        super().__init__()
        self.state_proj = Linear(max_state_dim, width, True, dtype, device)
        self.action_in_proj = Linear(max_action_dim, width, True, dtype, device)
        self.action_out_proj = Linear(width, max_action_dim, True, dtype, device)
        self.action_time_mlp_in = Linear(2 * width, width, True, dtype, device)
        self.action_time_mlp_out = Linear(width, width, True, dtype, device)

    def embed(
        self, x_t: torch.Tensor, t_emb: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        """x_t [B, H, A], t_emb [B, W], state [B, S_max] -> ([B, 1 + H, W], no condition)."""
        dtype = self.action_in_proj.weight.dtype
        actions = self.action_in_proj(x_t.to(dtype))
        times = t_emb.to(dtype)[:, None, :].expand_as(actions)
        fused = self.action_time_mlp_in(torch.cat((actions, times), dim=-1))
        tokens = self.action_time_mlp_out(F.silu(fused))
        state_token = self.state_proj(state.to(dtype))[:, None, :]
        return torch.cat((state_token, tokens), dim=1), None


class Pi05Head(nn.Module):
    has_state_token = False

    def __init__(self, width: int, max_action_dim: int, dtype: torch.dtype, device: str):
        super().__init__()
        self.action_in_proj = Linear(max_action_dim, width, True, dtype, device)
        self.action_out_proj = Linear(width, max_action_dim, True, dtype, device)
        self.time_mlp_in = Linear(width, width, True, dtype, device)
        self.time_mlp_out = Linear(width, width, True, dtype, device)

    def embed(
        self, x_t: torch.Tensor, t_emb: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t [B, H, A], t_emb [B, W] -> ([B, H, W], the adaRMS condition [B, W]); the state
        is in the prompt, not here."""
        dtype = self.action_in_proj.weight.dtype
        cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(t_emb.to(dtype)))))
        return self.action_in_proj(x_t.to(dtype)), cond


FlowHead = Pi0Head | Pi05Head


def velocity(head: FlowHead, expert_out: torch.Tensor, horizon: int) -> torch.Tensor:
    """float32 [B, H, A] velocity from the expert's outputs [B, S, W] (the last H are actions)."""
    return head.action_out_proj(expert_out[:, -horizon:]).to(torch.float32)
