"""SmolVLM2's image path as SmolVLA uses it: the Idefics3 / SigLIP vision transformer without
a patch mask, then the connector (pixel shuffle and a bias-free linear to the text width).

* Vision: a stride-`patch` conv, no CLS token, plus a learned position embedding; then pre-LN
  layers (LayerNorm, bidirectional attention, residual, LayerNorm, MLP, residual) and a final
  LayerNorm. Positions: patch (r, c) of an n x n grid takes the embedding of the
  `image_size / patch` grid cell its fractional coordinates (r / n, c / n) fall in
  (Idefics3's bucketing), which is (r, c) itself when the image is `image_size` square.
* Connector: patch (r, c) becomes token (r // s) * (n / s) + c // s, at channels
  ((r % s) * s + c % s) * width + channel, s = `scale_factor`; n^2 / s^2 tokens per image.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vla_server.policies.smolvla.config import VisionConfig
from vla_server.policies.smolvla.layers import activation


class VisionEmbeddings(nn.Module):
    def __init__(self, c: VisionConfig):
        super().__init__()
        self.patch_size = c.patch_size
        self.side = c.image_size // c.patch_size
        self.patch_embedding = nn.Conv2d(
            c.num_channels, c.hidden_size, kernel_size=c.patch_size, stride=c.patch_size
        )
        self.position_embedding = nn.Embedding(self.side**2, c.hidden_size)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[N, C, H, W] -> [N, (H / patch) * (W / patch), width]."""
        patches = self.patch_embedding(pixels.to(self.patch_embedding.weight.dtype))
        rows, cols = patches.shape[-2:]
        return patches.flatten(2).transpose(1, 2) + self.position_embedding(
            self.position_ids(rows, cols, pixels.device)
        )

    def position_ids(self, rows: int, cols: int, device: torch.device) -> torch.Tensor:
        boundaries = torch.arange(1 / self.side, 1.0, 1 / self.side, device=device)

        def buckets(n: int) -> torch.Tensor:
            coords = torch.arange(n, dtype=torch.float32, device=device) * (1.0 / n)
            return torch.bucketize(coords.clamp(max=1.0 - 1e-6), boundaries, right=True)

        return (buckets(rows)[:, None] * self.side + buckets(cols)[None, :]).flatten()


class VisionAttention(nn.Module):
    def __init__(self, c: VisionConfig):
        super().__init__()
        self.num_heads = c.num_heads
        self.q_proj = nn.Linear(c.hidden_size, c.hidden_size)
        self.k_proj = nn.Linear(c.hidden_size, c.hidden_size)
        self.v_proj = nn.Linear(c.hidden_size, c.hidden_size)
        self.out_proj = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, width = x.shape

        def heads(proj: nn.Linear) -> torch.Tensor:
            return proj(x).view(n, length, self.num_heads, -1).transpose(1, 2)

        q, k, v = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(n, length, width))


class VisionMLP(nn.Module):
    def __init__(self, c: VisionConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size)
        self.act = activation(c.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VisionLayer(nn.Module):
    def __init__(self, c: VisionConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.self_attn = VisionAttention(c)
        self.layer_norm2 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.mlp = VisionMLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class VisionEncoder(nn.Module):
    def __init__(self, c: VisionConfig):
        super().__init__()
        self.embeddings = VisionEmbeddings(c)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(VisionLayer(c) for _ in range(c.num_layers))
        self.post_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[N, C, H, W] -> [N, patches, width]."""
        x = self.embeddings(pixels)
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)


class Connector(nn.Module):
    def __init__(self, vision_width: int, text_width: int, scale_factor: int):
        super().__init__()
        self.scale_factor = scale_factor
        self.proj = nn.Linear(vision_width * scale_factor**2, text_width, bias=False)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """[N, n * n, width] -> [N, (n / s)^2, text width]."""
        return self.proj(pixel_shuffle(patches, self.scale_factor))


def pixel_shuffle(patches: torch.Tensor, s: int) -> torch.Tensor:
    """Each s x s block of the square patch grid folded into one token (module docstring)."""
    n, length, width = patches.shape
    side = round(length**0.5)
    if side * side != length or side % s:
        raise ValueError(f"{length} patches do not form a square grid divisible by {s}")
    grid = patches.reshape(n, side // s, s, side // s, s, width)  # [N, R, r, C, c, width]
    return grid.permute(0, 1, 3, 2, 4, 5).reshape(n, (side // s) ** 2, s * s * width)
