"""The toy's action head: a velocity from the prompt's layer-0 keys, the noisy chunk, the time
and the robot state, so a chunk depends on every input a real head reads.

    v = tanh(W · mean_p(k0[p])) + a ⊙ x_t + b · t + c ⊙ state

Tensors (`toy_head.`): `context.weight` [width, kv_heads·head_dim], `scale_x`, `scale_t`,
`scale_state` [width].
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from vla_server.model.paged_prefix import PagedPrefix

PREFIX = "toy_head."


class ToyHead(nn.Module):
    def __init__(self, chunk_size: int, width: int, kv_dim: int, device: torch.device):
        super().__init__()
        self.chunk_size, self.width = chunk_size, width
        self.context = nn.Linear(kv_dim, width, bias=False, device=device)
        self.scale_x = nn.Parameter(torch.zeros(width, device=device))
        self.scale_t = nn.Parameter(torch.zeros(width, device=device))
        self.scale_state = nn.Parameter(torch.zeros(width, device=device))

    def owns(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def plan_weights(self, model_path: str | Path) -> dict[str, torch.Tensor]:
        expected = {PREFIX + n: tuple(p.shape) for n, p in self.named_parameters()}
        found: dict[str, torch.Tensor] = {}
        with safe_open(str(Path(model_path) / "model.safetensors"), "pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not iterable
                if self.owns(name):
                    if name not in expected:
                        raise ValueError(f"unexpected tensor {name}")
                    found[name] = f.get_tensor(name).float()
        missing = sorted(set(expected) - set(found))
        if missing:
            raise ValueError(f"missing tensor {missing[0]}")
        for name, tensor in found.items():
            if tuple(tensor.shape) != expected[name]:
                raise ValueError(f"{name}: shape {list(tensor.shape)}, expected {expected[name]}")
        return found

    def load_weights(self, plan: dict[str, torch.Tensor], *, progress: bool = True) -> None:
        with torch.no_grad():
            for name, param in self.named_parameters():
                param.copy_(plan[PREFIX + name])

    @torch.no_grad()
    def velocity(
        self,
        prefix: PagedPrefix,
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        keys, _ = prefix.kv(0)
        keys = keys.float().flatten(2)  # [B, P, kv_dim]
        valid = prefix.valid[..., None].float()
        mean = (keys * valid).sum(1) / valid.sum(1)
        v = torch.tanh(self.context(mean))[:, None, :] + x_t * self.scale_x
        v = v + time[:, None, None] * self.scale_t
        if state is not None:
            v = v + state[:, None, :] * self.scale_state
        return v
