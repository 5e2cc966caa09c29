"""A vision transformer with timm's parameter names and arithmetic: the towers of Prismatic/OpenVLA.

OpenVLA builds its towers with `timm.create_model(id, num_classes=0, img_size=..., act_layer=...)`
and reads the output of the second-to-last block, patch tokens only. timm itself cannot be a
dependency here (it needs torchvision, whose PyPI build does not load next to the CPU torch), so
this module computes the same function over the same state-dict names:

    x = patch_embed.proj(pixels) -> [N, patches, D]
    x = cat([cls_token] + [reg_token], x) + pos_embed    (DINOv2: pos_embed added before the cat)
    x = norm_pre(x)                                      (CLIP only)
    x = x + ls1(attn(norm1(x))); x = x + ls2(mlp(norm2(x)))   for blocks 0 .. depth-2
    features = x[:, cls + registers:]

The timm model id fixes the design (`TowerFamily`: patch size, heads, extra tokens, norms,
activation); the checkpoint's tensor shapes give the width, MLP size and depth, so fine-tuned
and reduced-size towers of the same family load too. LayerScale is stored as `scale_factor`
(OpenVLA's converter renames timm's `gamma`). The last block, the final `norm` and SigLIP's
attention-pool head are in the checkpoint but do not feed the features.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TowerFamily:
    patch_size: int
    num_heads: int
    class_token: bool
    reg_tokens: int
    no_embed_class: bool  # pos_embed covers the patches only, added before the prefix tokens
    pre_norm: bool  # a LayerNorm before the blocks, and no bias on the patch projection
    layer_scale: bool
    norm_eps: float
    act: str  # "gelu" (exact) or "quick_gelu"

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token) + self.reg_tokens


_DINOV2_REG = TowerFamily(14, 16, True, 4, True, False, True, 1e-6, "gelu")
_SIGLIP = TowerFamily(14, 16, False, 0, False, False, False, 1e-6, "gelu")
_CLIP = TowerFamily(14, 16, True, 0, False, True, False, 1e-5, "quick_gelu")
_IN1K = TowerFamily(16, 16, True, 0, False, False, False, 1e-6, "gelu")
# The timm ids Prismatic's configuration names (VISION_BACKBONE_TO_TIMM_ID).
TIMM_FAMILIES = {
    "vit_large_patch14_reg4_dinov2.lvd142m": _DINOV2_REG,
    "vit_so400m_patch14_siglip_224": _SIGLIP,
    "vit_so400m_patch14_siglip_384": _SIGLIP,
    "vit_large_patch14_clip_224.openai": _CLIP,
    "vit_large_patch14_clip_336.openai": _CLIP,
    "vit_large_patch16_224.augreg_in21k_ft_in1k": _IN1K,
}
# Tensors of a timm tower that never reach the second-to-last block's output.
_UNUSED_RE = re.compile(r"^(norm|fc_norm|attn_pool|head)\.")
_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.")


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "quick_gelu": QuickGELU}


@dataclass(frozen=True)
class TowerShape:
    """What the checkpoint's tensors say about a tower: widths and depth."""

    embed_dim: int
    in_chans: int
    mlp_hidden: int
    depth: int
    num_positions: int

    @classmethod
    def from_shapes(cls, shapes: dict[str, tuple[int, ...]], where: str) -> TowerShape:
        """From `{timm name: shape}`; raises naming the first tensor a tower cannot lack."""
        for name in ("patch_embed.proj.weight", "pos_embed", "blocks.0.mlp.fc1.weight"):
            if name not in shapes:
                raise ValueError(f"{where}: the checkpoint has no {where}.{name}")
        embed_dim, in_chans = shapes["patch_embed.proj.weight"][:2]
        blocks = {int(m.group(1)) for n in shapes if (m := _BLOCK_RE.match(n))}
        return cls(
            embed_dim=embed_dim,
            in_chans=in_chans,
            mlp_hidden=shapes["blocks.0.mlp.fc1.weight"][0],
            depth=max(blocks) + 1,
            num_positions=shapes["pos_embed"][1],
        )


class _Module(nn.Module):
    """A named container, so parameters get timm's dotted names."""


class _Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, tokens, dim = x.shape
        qkv = self.qkv(x).view(n, tokens, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(n, tokens, dim))


class _LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale_factor = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale_factor


class _Block(nn.Module):
    def __init__(self, family: TowerFamily, shape: TowerShape, act: str):
        super().__init__()
        dim, eps = shape.embed_dim, family.norm_eps
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = _Attention(dim, family.num_heads)
        self.ls1 = _LayerScale(dim) if family.layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = _Module()
        self.mlp.fc1 = nn.Linear(dim, shape.mlp_hidden)
        self.mlp.act = ACTIVATIONS[act]()
        self.mlp.fc2 = nn.Linear(shape.mlp_hidden, dim)
        self.ls2 = _LayerScale(dim) if family.layer_scale else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        mlp = self.mlp
        return x + self.ls2(mlp.fc2(mlp.act(mlp.fc1(self.norm2(x)))))


class TimmViT(nn.Module):
    """The blocks up to the second-to-last of a timm ViT; `forward` gives its patch features."""

    def __init__(
        self, family: TowerFamily, shape: TowerShape, image_size: int, act: str | None = None
    ):
        super().__init__()
        self.family = family
        self.grid = image_size // family.patch_size
        dim = shape.embed_dim
        self.patch_embed = _Module()
        self.patch_embed.proj = nn.Conv2d(
            shape.in_chans,
            dim,
            family.patch_size,
            stride=family.patch_size,
            bias=not family.pre_norm,
        )
        if family.class_token:
            self.cls_token = nn.Parameter(torch.empty(1, 1, dim))
        if family.reg_tokens:
            self.reg_token = nn.Parameter(torch.empty(1, family.reg_tokens, dim))
        self.pos_embed = nn.Parameter(torch.empty(1, self.expected_positions, dim))
        self.norm_pre = nn.LayerNorm(dim, eps=family.norm_eps) if family.pre_norm else None
        self.blocks = nn.ModuleList(
            _Block(family, shape, act or family.act) for _ in range(shape.depth - 1)
        )
        self.depth = shape.depth

    @property
    def expected_positions(self) -> int:
        with_cls = self.family.class_token and not self.family.no_embed_class
        return self.grid**2 + int(with_cls)

    @property
    def num_patches(self) -> int:
        return self.grid**2

    def unused(self, name: str) -> bool:
        """A checkpoint tensor of this tower that does not feed the features."""
        if _UNUSED_RE.match(name):
            return True
        match = _BLOCK_RE.match(name)
        return match is not None and int(match.group(1)) == self.depth - 1

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(pixels).flatten(2).transpose(1, 2)
        n = x.shape[0]
        prefix = []
        if self.family.class_token:
            prefix.append(self.cls_token.expand(n, -1, -1))
        if self.family.reg_tokens:
            prefix.append(self.reg_token.expand(n, -1, -1))
        if self.family.no_embed_class:
            x = torch.cat([*prefix, x + self.pos_embed], dim=1)
        else:
            x = torch.cat([*prefix, x], dim=1) + self.pos_embed
        if self.norm_pre is not None:
            x = self.norm_pre(x)
        for block in self.blocks:
            x = block(x)
        return x[:, self.family.num_prefix_tokens :]
