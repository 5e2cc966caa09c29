"""The prefix of SmolVLA (LeRobot `VLAFlowMatching.embed_prefix`) and its pass through the
truncated VLM text decoder, producing the per-layer K/V (`PrefixKV`).

Prefix tokens, in order: per camera slot (present cameras first, then LeRobot's empty ones)
[`<fake_token_around_image><global-img>` if `add_image_special_tokens`] + the image's tokens
(connector output x sqrt(width), in the embedding's dtype) [+ `<fake_token_around_image>`];
then the instruction's tokens (embeddings x sqrt(width)); then one state token
(`state_proj(state)`, unscaled). Valid: the image tokens as their camera's mask, the text as
its attention mask, the special and state tokens always.

Attention: the big_vision rule on autoregressive flags (0 for images and text, 1 for the
state): token i sees valid token j iff cumsum(ar)[j] <= cumsum(ar)[i]; so images and text see
each other but not the state, the state sees everything. Positions count valid tokens.

Every VLM layer self-attends over the prefix (LeRobot's prefill runs all layers in self mode,
cross or not); the last layer's MLP is skipped since nothing reads its output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from vla_server.policies.smolvla.config import SmolVLAConfig
from vla_server.policies.smolvla.layers import DecoderLayer, apply_rope, attend
from vla_server.policies.smolvla.prefix_kv import PrefixKV
from vla_server.policies.smolvla.vision import Connector, VisionEncoder


@dataclass
class PrefixInputs:
    """A batch's processed observations (`SmolVLAProcessor` makes them from raw ones)."""

    images: torch.Tensor  # [B, slots, 3, H, W] in [-1, 1], resized with padding
    image_masks: torch.Tensor  # [B, slots] bool: False for LeRobot's empty camera slots
    tokens: torch.Tensor  # [B, T] int64 instruction tokens
    token_mask: torch.Tensor  # [B, T] bool
    state: torch.Tensor  # [B, max_state_dim] float32, normalized and zero padded


@dataclass
class PrefixEmbedding:
    embeds: torch.Tensor  # [B, L, width]
    valid: torch.Tensor  # [B, L] bool
    ar: torch.Tensor  # [B, L] int64 autoregressive flags

    def compacted(self) -> PrefixEmbedding:
        """Valid tokens only, left-aligned in their order, right-padded to the longest row."""
        lens = self.valid.sum(dim=1)
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)
        order = order[:, : int(lens.max())]
        positions = torch.arange(order.shape[1], device=order.device)
        index = order[..., None].expand(-1, -1, self.embeds.shape[-1])
        embeds = torch.gather(self.embeds, 1, index)
        valid = positions[None] < lens[:, None]
        return PrefixEmbedding(embeds, valid, torch.gather(self.ar, 1, order))


class PrefixEncoder(nn.Module):
    def __init__(self, c: SmolVLAConfig, image_start_ids: list[int], image_end_ids: list[int]):
        """`image_*_ids`: the special tokens around each image (empty unless
        `add_image_special_tokens`)."""
        super().__init__()
        width = c.text.hidden_size
        self.vision = VisionEncoder(c.vision)
        self.connector = Connector(c.vision.hidden_size, width, c.scale_factor)
        self.embed_tokens = nn.Embedding(c.vocab_size, width)
        self.layers = nn.ModuleList(DecoderLayer(c.text) for _ in range(c.text.num_layers))
        self.state_proj = nn.Linear(c.max_state_dim, width)
        # Plain lists, not buffers: the model is built on the meta device and only the
        # checkpoint's tensors are loaded into it.
        self.image_start_ids = list(image_start_ids)
        self.image_end_ids = list(image_end_ids)

    def forward(self, inputs: PrefixInputs) -> PrefixKV:
        return self.layer_kv(self.embed(inputs).compacted())

    def embed(self, inputs: PrefixInputs) -> PrefixEmbedding:
        """LeRobot's prefix layout, masked tokens included."""
        rows = inputs.state.shape[0]
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        for slot in range(inputs.images.shape[1]):
            parts += self._image_parts(inputs.images[:, slot], inputs.image_masks[:, slot], rows)
        text = self.embed_tokens(inputs.tokens) * math.sqrt(self.embed_tokens.embedding_dim)
        parts.append((text, inputs.token_mask))
        state = self.state_proj(inputs.state.to(self.state_proj.weight.dtype))[:, None]
        parts.append((state, torch.ones_like(inputs.token_mask[:, :1])))
        # torch.cat promotes: with a bfloat16 VLM the float32 state token keeps its precision
        # until the first residual, as in LeRobot.
        embeds = torch.cat([p[0] for p in parts], dim=1)
        valid = torch.cat([p[1] for p in parts], dim=1)
        ar = torch.zeros_like(valid, dtype=torch.long)
        ar[:, -1] = 1  # the state token: images and text must not see it
        return PrefixEmbedding(embeds, valid, ar)

    def _image_parts(
        self, images: torch.Tensor, mask: torch.Tensor, rows: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        tokens = self.embed_image(images) if bool(mask.any()) else None
        if tokens is None:  # every row's slot is empty: masked, so any values do
            n = (images.shape[-1] // self.vision.embeddings.patch_size) ** 2
            n //= self.connector.scale_factor**2
            tokens = images.new_zeros((rows, n, self.embed_tokens.embedding_dim))
        parts = [(tokens, mask[:, None].expand(-1, tokens.shape[1]))]
        if self.image_start_ids:
            parts.insert(0, self._special(self.image_start_ids, rows))
        if self.image_end_ids:
            parts.append(self._special(self.image_end_ids, rows))
        return parts

    def embed_image(self, images: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] in [-1, 1] -> [B, tokens, width], scaled by sqrt(width) as a tensor of
        the embedding's dtype (LeRobot's rounding in bfloat16)."""
        tokens = self.connector(self.vision(images))
        scale = torch.tensor(tokens.shape[-1] ** 0.5, dtype=tokens.dtype, device=tokens.device)
        return tokens * scale

    def _special(self, ids: list[int], rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids_t = torch.tensor(ids, dtype=torch.long, device=self.embed_tokens.weight.device)
        embeds = self.embed_tokens(ids_t)[None].expand(rows, -1, -1)  # unscaled, as LeRobot
        return embeds, torch.ones(embeds.shape[:2], dtype=torch.bool, device=embeds.device)

    def layer_kv(self, prefix: PrefixEmbedding) -> PrefixKV:
        """Run the VLM layers over a compacted prefix and keep each layer's post-RoPE K/V."""
        h, valid = prefix.embeds, prefix.valid
        cum = torch.cumsum(prefix.ar * valid, dim=1)
        allowed = valid[:, None, :] & (cum[:, None, :] <= cum[:, :, None])
        positions = torch.arange(h.shape[1], device=h.device)[None].expand(h.shape[0], -1)
        keys, values = [], []
        for n, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.normed(h)
            k = apply_rope(attn.heads(attn.k_proj, x), positions)
            v = attn.heads(attn.v_proj, x)
            keys.append(k)
            values.append(v)
            if n + 1 < len(self.layers):
                q = apply_rope(attn.heads(attn.q_proj, x), positions)
                h = layer.finish(h, attend(q, k, v, allowed))
        return PrefixKV(keys, values, valid)
