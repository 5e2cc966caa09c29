"""Test-only references for pi0 and pi0.5, sharing no code with the node:

* `hf_pi0`: transformers' own `PI0ForConditionalGeneration` (`pi_common.hf_reference`: a
  code-made `PI0Config` with the checkpoint's `vlm_config` / `dit_config`, its weights copied
  from the checkpoint's openpi-named tensors through a rename table; no node model code); with
  `hf_prefix_cache`, the PaliGemma prefix cache it denoises over.
* `SpecReference`: pi0 and pi0.5 written from the spec (shared/reference/pi0.md §2, openpi's
  `pi0.py` / `gemma.py` semantics) as openpi trains them: one dense joint sequence [prefix ;
  suffix] through every layer, each stream normed and projected with its own weights (the
  backbone's for the prefix, the expert's for the suffix), RoPE at `cumsum(valid) - 1`, one
  attention under `make_attn_mask` (token i sees valid j iff cumsum(ar)[j] <= cumsum(ar)[i]),
  each stream's own o_proj, residual, norm and GeGLU; pi0.5's expert norms adaRMS with gates.
  The prefix is recomputed at every Euler step (no KV cache). Only the SigLIP tower is
  transformers' (`SiglipVisionModel`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F

from vla_server.policies.pi_common.hf_reference import (
    EXPERT,
    PALIGEMMA,
    checkpoint_tensors,
    folder_config,
    hf_policy,
    sinusoid_frequencies,
)


@cache
def hf_pi0(folder: str) -> torch.nn.Module:
    return hf_policy(folder, "pi0")


@dataclass
class HfInputs:
    """transformers PI0's batch of one: images first (only the valid cameras' tokens, or all
    with the masked ones' attention 0), then the text."""

    input_ids: torch.Tensor  # [1, L]
    pixel_values: torch.Tensor  # [1, cameras, 3, S, S]
    pixel_attention_mask: torch.Tensor  # [1, cameras] bool
    attention_mask: torch.Tensor  # [1, L]


def hf_inputs(model, pixels: torch.Tensor, present: list[bool], text_ids: list[int],
              masked_tokens: bool) -> HfInputs:  # fmt: skip
    """`masked_tokens`: every camera gets its image tokens and a missing one's are masked out
    (openpi's layout); otherwise only present cameras have tokens (transformers' processor)."""
    per_image = model.config.vlm_config.text_config.num_image_tokens
    image_id = model.config.vlm_config.image_token_id
    if masked_tokens:
        keep = [int(p) for p in present for _ in range(per_image)]
        cameras = torch.ones(len(present), dtype=torch.bool)
    else:
        keep = [1] * (per_image * sum(present))
        cameras = torch.tensor(present)
    ids = [image_id] * len(keep) + text_ids
    return HfInputs(
        input_ids=torch.tensor([ids]),
        pixel_values=pixels[None],
        pixel_attention_mask=cameras[None],
        attention_mask=torch.tensor([keep + [1] * len(text_ids)]),
    )


@torch.no_grad()
def hf_sample(model, inputs: HfInputs, state: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return model.sample_actions(
        state=state[None],
        input_ids=inputs.input_ids,
        pixel_values=inputs.pixel_values,
        noise=noise,
        attention_mask=inputs.attention_mask,
        pixel_attention_mask=inputs.pixel_attention_mask,
    )[0]


@torch.no_grad()
def hf_prefix_cache(model, inputs: HfInputs) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (K, V) [L, kv_heads, head_dim] of the prefix, as `sample_actions` makes it."""
    embeds = model.model.embed_prefix(
        inputs.input_ids, inputs.pixel_values, inputs.pixel_attention_mask
    )
    cache = model.model.vlm(
        inputs_embeds=embeds,
        attention_mask=inputs.attention_mask,
        position_ids=inputs.attention_mask.cumsum(-1) - 1,
        token_type_ids=torch.zeros_like(inputs.input_ids),
        use_cache=True,
    ).cache
    return [(layer.keys[0].transpose(0, 1), layer.values[0].transpose(0, 1))
            for layer in cache.layers]  # fmt: skip


class SpecReference:
    """pi0 / pi0.5 from the spec, on one observation at a time, in float32."""

    def __init__(self, folder: str | Path, kind: str):
        from transformers import SiglipVisionConfig, SiglipVisionModel

        raw = folder_config(folder)
        self.kind, self.w = kind, checkpoint_tensors(folder)
        text, vision = raw["vlm_config"]["text_config"], raw["vlm_config"]["vision_config"]
        dit = raw["dit_config"]
        self.heads, self.kv_heads = text["num_attention_heads"], text["num_key_value_heads"]
        self.head_dim, self.depth = text["head_dim"], text["num_hidden_layers"]
        assert (dit["num_attention_heads"], dit["head_dim"]) == (self.heads, self.head_dim)
        self.text_width, self.expert_width = text["hidden_size"], dit["hidden_size"]
        self.horizon = raw.get("chunk_size", raw.get("action_horizon"))
        keys = {k: v for k, v in vision.items() if k != "model_type"}
        self.siglip = SiglipVisionModel(SiglipVisionConfig(**keys)).eval()
        tower = PALIGEMMA + "model.vision_tower.vision_model."
        self.siglip.load_state_dict({k[len(tower) :]: v for k, v in self.w.items()
                                     if k.startswith(tower)})  # fmt: skip

    # --- the prefix -----------------------------------------------------------------------
    def prefix(self, pixels: torch.Tensor, text_ids: list[int]) -> torch.Tensor:
        """[cameras * tokens + text, text width]: projected SigLIP patches, then the text
        embeddings scaled by sqrt(width) (image embeddings are not)."""
        projector = PALIGEMMA + "model.multi_modal_projector.linear."
        patches = self.siglip(pixel_values=pixels).last_hidden_state
        images = F.linear(patches, self.w[projector + "weight"], self.w[projector + "bias"])
        table = self.w[PALIGEMMA + "lm_head.weight"]
        words = table[torch.tensor(text_ids)] * math.sqrt(self.text_width)
        return torch.cat((images.reshape(-1, self.text_width), words))

    # --- the suffix -----------------------------------------------------------------------
    def time_embedding(self, t: float) -> torch.Tensor:
        angles = sinusoid_frequencies(self.expert_width) * torch.tensor(t, dtype=torch.float32)
        return torch.cat((angles.sin(), angles.cos())).float()

    def suffix(self, x: torch.Tensor, t: float, state: torch.Tensor):
        """(suffix embeddings, ar flags, adaRMS condition or None)."""
        lin = self._linear
        t_emb = self.time_embedding(t)
        actions = lin("action_in_proj", x)
        if self.kind == "pi0":
            t_rows = t_emb[None].expand(self.horizon, -1)
            fused = lin("action_time_mlp_in", torch.cat((actions, t_rows), -1))
            mixed = lin("action_time_mlp_out", F.silu(fused))
            tokens = torch.cat((lin("state_proj", state)[None], mixed))
            return tokens, [1, 1] + [0] * (self.horizon - 1), None
        cond = F.silu(lin("time_mlp_out", F.silu(lin("time_mlp_in", t_emb))))
        return actions, [1] + [0] * (self.horizon - 1), cond

    def _linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    # --- the joint transformer ------------------------------------------------------------
    def _norm(self, prefix: str, x: torch.Tensor, cond: torch.Tensor | None):
        """(normed x, gate or None) by the norm whose tensors start with `prefix`."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
        if prefix + ".weight" in self.w:
            return normed * (1.0 + self.w[prefix + ".weight"]), None
        modulation = F.linear(
            cond, self.w[prefix + ".dense.weight"], self.w[prefix + ".dense.bias"]
        )
        scale, shift, gate = modulation.chunk(3, dim=-1)
        return normed * (1 + scale) + shift, gate

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = positions.float()[:, None] * inv_freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        first, second = x[..., :half], x[..., half:]
        return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)

    def _layer(self, streams, layer: int, cond, positions, allowed):
        """One joint layer over [prefix stream, suffix stream]."""
        prefixes = (f"{PALIGEMMA}model.language_model.layers.{layer}.",
                    f"{EXPERT}model.layers.{layer}.")  # fmt: skip
        q, k, v, gates = [], [], [], []
        for x, p in zip(streams, prefixes, strict=True):
            y, gate = self._norm(p + "input_layernorm", x, cond)
            gates.append(gate)
            attn = p + "self_attn."
            q.append(
                F.linear(y, self.w[attn + "q_proj.weight"]).view(-1, self.heads, self.head_dim)
            )
            k.append(
                F.linear(y, self.w[attn + "k_proj.weight"]).view(-1, self.kv_heads, self.head_dim)
            )
            v.append(
                F.linear(y, self.w[attn + "v_proj.weight"]).view(-1, self.kv_heads, self.head_dim)
            )
        q, k = self._rope(torch.cat(q), positions), self._rope(torch.cat(k), positions)
        v = torch.cat(v)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        logits = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
        logits = logits.masked_fill(~allowed[None], -2.3819763e38)
        mixed = torch.einsum("hqk,khd->qhd", logits.softmax(-1), v).reshape(len(positions), -1)
        out, start = [], 0
        for x, p, gate in zip(streams, prefixes, gates, strict=True):
            o = F.linear(mixed[start : start + len(x)], self.w[p + "self_attn.o_proj.weight"])
            start += len(x)
            x = x + (o if gate is None else o * gate)
            y, gate = self._norm(p + "post_attention_layernorm", x, cond)
            mlp = p + "mlp."
            hidden = F.gelu(F.linear(y, self.w[mlp + "gate_proj.weight"]), approximate="tanh")
            hidden = hidden * F.linear(y, self.w[mlp + "up_proj.weight"])
            y = F.linear(hidden, self.w[mlp + "down_proj.weight"])
            out.append(x + (y if gate is None else y * gate))
        return out

    def velocity(self, prefix: torch.Tensor, valid: list[bool], x, t: float, state):
        suffix, suffix_ar, cond = self.suffix(x, t, state)
        mask = torch.tensor(valid + [True] * len(suffix))
        ar = torch.tensor([0] * len(prefix) + suffix_ar)
        cum = ar.cumsum(0)
        allowed = (cum[None, :] <= cum[:, None]) & mask[None, :] & mask[:, None]
        allowed |= torch.eye(len(mask), dtype=torch.bool)  # a masked token's row stays finite
        positions = mask.long().cumsum(0) - 1
        streams = [prefix, suffix]
        for layer in range(self.depth):
            streams = self._layer(streams, layer, cond, positions, allowed)
        out, _gate = self._norm(EXPERT + "model.norm", streams[1], cond)
        return self._linear("action_out_proj", out[-self.horizon :])

    @torch.no_grad()
    def sample(self, pixels, valid_cameras: list[bool], text_ids: list[int], state, noise,
               num_steps: int = 10) -> torch.Tensor:  # fmt: skip
        """Euler from t = 1 (noise [H, A]) to 0; masked cameras' tokens are not attended and
        do not advance positions."""
        per_image = self.siglip.config.image_size // self.siglip.config.patch_size
        valid = [c for c in valid_cameras for _ in range(per_image**2)] + [True] * len(text_ids)
        prefix = self.prefix(pixels, text_ids)
        x, dt = noise.clone(), -1.0 / num_steps
        for step in range(num_steps):
            x = x + dt * self.velocity(prefix, valid, x, 1.0 + step * dt, state)
        return x
