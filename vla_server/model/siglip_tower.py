"""A SigLIP vision tower without its pooling head: the function transformers'
`SiglipVisionModel(...).last_hidden_state` computes (patch convolution + position embeddings,
pre-norm encoder layers, post-layernorm), with each layer's q/k/v projections fused into one
matmul: on a CPU the same FLOPs in one call of three times the width instead of three calls.

Parameter names are transformers' (`embeddings.patch_embedding`, `encoder.layers.{i}.
self_attn.out_proj`, ...), except the fused `self_attn.qkv_proj`, which `fuse_qkv` builds from
a checkpoint's `q_proj`, `k_proj` and `v_proj` tensors.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class SiglipAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.qkv_proj = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        qkv = self.qkv_proj(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], scale=self.head_dim**-0.5)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, w))


class SiglipMLP(nn.Module):
    def __init__(self, width: int, inner: int, act: Any):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(width, inner), nn.Linear(inner, width), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SiglipLayer(nn.Module):
    def __init__(self, width: int, heads: int, inner: int, eps: float, act: Any):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(width, eps=eps)
        self.self_attn = SiglipAttention(width, heads)
        self.layer_norm2 = nn.LayerNorm(width, eps=eps)
        self.mlp = SiglipMLP(width, inner, act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipTower(nn.Module):
    def __init__(self, settings: dict[str, Any]):
        """`settings`: the vision config's `hf_tower.TOWER_KEYS`."""
        from transformers.activations import ACT2FN

        super().__init__()
        width, patch = settings["hidden_size"], settings["patch_size"]
        self.embeddings = nn.Module()
        self.embeddings.patch_embedding = nn.Conv2d(
            settings["num_channels"], width, kernel_size=patch, stride=patch
        )
        patches = (settings["image_size"] // patch) ** 2
        self.embeddings.position_embedding = nn.Embedding(patches, width)
        act, eps = ACT2FN[settings["hidden_act"]], settings["layer_norm_eps"]
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(
            SiglipLayer(width, settings["num_attention_heads"], settings["intermediate_size"],
                        eps, act)
            for _ in range(settings["num_hidden_layers"])
        )  # fmt: skip
        self.post_layernorm = nn.LayerNorm(width, eps=eps)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels [N, C, S, S] -> [N, patches, width]."""
        x = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        x = x + self.embeddings.position_embedding.weight
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)


def fuse_qkv(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tower tensors under transformers' names with each layer's q/k/v projections concatenated
    into `qkv_proj` (q, k, v rows in that order); the other tensors as they are."""
    out = dict(tensors)
    for name in [n for n in tensors if n.endswith("self_attn.q_proj.weight")]:
        base = name.removesuffix("q_proj.weight")
        for kind in ("weight", "bias"):
            parts = [out.pop(f"{base}{p}_proj.{kind}") for p in "qkv"]
            out[f"{base}qkv_proj.{kind}"] = torch.cat(parts)
    return out
