"""Llama-family decoder (Llama, Qwen2, Gemma, and the language models inside LLaVA-style and
prefix-LM VLAs) over the paged KV pool.

Gemma differs in three places, read from the config: the MLP's activation (tanh-approximate
GELU), RMSNorm's `(1 + w)` scaling in float32 (`UnitOffsetRMSNorm`), and token embeddings
scaled by sqrt(hidden_size) in the model dtype, as transformers' `GemmaTextScaledWordEmbedding`
does; caller and image embeddings replace token embeddings after that scaling, unscaled.

Attention goes through an `AttentionBackend`, which owns the KV cache; this module only does
the per-token math on the ragged token axis of a `ForwardBatch`. The q/k/v projections and the
gate/up projections are fused into single matmuls; `weight_sources` says which checkpoint
tensors are concatenated into each fused weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vla_server.model.attention.base import AttentionBackend
from vla_server.model.config import ModelConfig
from vla_server.model.forward_batch import ForwardBatch
from vla_server.model.layers import RMSNorm, UnitOffsetRMSNorm, empty_weight
from vla_server.model.rotary import RotaryEmbedding, apply_rotary
from vla_server.model.weight_loader import WeightSources

_ACTIVATIONS = {
    "silu": F.silu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def rms_norm(config: ModelConfig, dtype: torch.dtype, device: str) -> RMSNorm:
    norm = UnitOffsetRMSNorm if config.norm_unit_offset else RMSNorm
    return norm(config.hidden_size, config.rms_norm_eps, dtype, device)


class Linear(nn.Module):
    def __init__(
        self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype, device: str
    ):
        super().__init__()
        self.weight = empty_weight(out_features, in_features, dtype=dtype, device=device)
        self.bias = empty_weight(out_features, dtype=dtype, device=device) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int, dtype: torch.dtype, device: str):
        super().__init__()
        self.weight = empty_weight(num_embeddings, dim, dtype=dtype, device=device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int, dtype: torch.dtype, device: str):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        qkv_out = self.q_size + 2 * self.kv_size
        self.qkv_proj = Linear(config.hidden_size, qkv_out, config.qkv_bias, dtype, device)
        self.o_proj = Linear(self.q_size, config.hidden_size, config.o_bias, dtype, device)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        q, k, v = self.rotated_qkv(x, cos, sin)
        out = attn.forward(q, k, v, self.layer_id, self.scale, batch)
        return self.o_proj(out.reshape(-1, self.q_size))

    def rotated_qkv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [n, heads, head_dim] and k, v [n, kv_heads, head_dim] of tokens x [n, hidden], q
        and k rotated by cos/sin [n, head_dim / 2]."""
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = apply_rotary(q.view(-1, self.num_heads, self.head_dim), cos, sin)
        k = apply_rotary(k.view(-1, self.num_kv_heads, self.head_dim), cos, sin)
        return q, k, v.view(-1, self.num_kv_heads, self.head_dim)

    def rotated_kv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`rotated_qkv`'s k and v alone: the projection's K/V rows, no queries."""
        proj = self.qkv_proj
        bias = None if proj.bias is None else proj.bias[self.q_size :]
        k, v = F.linear(x, proj.weight[self.q_size :], bias).split(self.kv_size, dim=-1)
        k = apply_rotary(k.view(-1, self.num_kv_heads, self.head_dim), cos, sin)
        return k, v.view(-1, self.num_kv_heads, self.head_dim)


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: str):
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.gate_up_proj = Linear(hidden, 2 * inter, False, dtype, device)
        self.down_proj = Linear(inter, hidden, False, dtype, device)
        self.act = _ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int, dtype: torch.dtype, device: str):
        super().__init__()
        self.input_layernorm = rms_norm(config, dtype, device)
        self.self_attn = LlamaAttention(config, layer_id, dtype, device)
        self.post_attention_layernorm = rms_norm(config, dtype, device)
        self.mlp = LlamaMLP(config, dtype, device)

    def forward(
        self,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, batch, attn)
        return h + self.mlp(self.post_attention_layernorm(h))

    def write_kv(
        self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> None:  # fmt: skip
        """Only this layer's K/V of h into the pool: what a later token or an action head
        reads of the last layer when nothing reads the stack's outputs."""
        k, v = self.self_attn.rotated_kv(self.input_layernorm(h), cos, sin)
        attn.kv_pool.set_kv(self.self_attn.layer_id, batch.out_cache_loc, k, v)


class LlamaForCausalLM(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        *,
        dtype: torch.dtype,
        device: str = "cpu",
        max_positions: int | None = None,
    ):
        super().__init__()
        self.config = config
        self.dtype = dtype
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size, dtype, device)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i, dtype, device) for i in range(config.num_layers)
        )
        self.norm = rms_norm(config, dtype, device)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, False, dtype, device)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        positions = max(max_positions or 0, config.max_position_embeddings)
        self.rotary = RotaryEmbedding(config, positions, device)

    def forward(
        self, batch: ForwardBatch, attn: AttentionBackend, *, outputs: bool = True
    ) -> torch.Tensor | None:
        """Hidden states [num_tokens, hidden] after the final norm, for every new token.

        `outputs=False` (nothing reads them: a prefill chunk, the prefix an action head
        denoises over) writes every layer's K/V and returns None: the last layer's attention
        and MLP, whose results only the outputs read, are skipped.
        The caller has run `attn.init_forward_metadata(batch)` for this batch.
        """
        h = self.embed(batch)
        token_seq_lens = None
        if self.rotary.is_dynamic and max(batch.seq_lens_cpu) > self.config.max_position_embeddings:
            token_seq_lens = torch.repeat_interleave(batch.seq_lens, batch.extend_lens)
        cos, sin = self.rotary.cos_sin(batch.positions, token_seq_lens)
        *layers, last = self.layers
        for layer in layers:
            h = layer(h, cos, sin, batch, attn)
        if not outputs:
            last.write_kv(h, cos, sin, batch, attn)
            return None
        return self.norm(last(h, cos, sin, batch, attn))

    def embed(self, batch: ForwardBatch) -> torch.Tensor:
        """Token embeddings, replaced by caller embeddings where `input_embeds_mask` is True.

        `input_embeds` is either [num_tokens, hidden] (rows outside the mask are ignored) or
        [mask.sum(), hidden] (just the replacing rows, in token order).
        """
        mask = batch.input_embeds_mask
        if batch.input_embeds is None or mask is None:
            return self.embed_ids(batch.input_ids)
        # Masked positions may hold pad ids outside the vocabulary (image hashes).
        h = self.embed_ids(batch.input_ids.masked_fill(mask, 0))
        embeds = batch.input_embeds.to(h.dtype)
        if embeds.shape[0] == h.shape[0]:
            return torch.where(mask[:, None], embeds, h)
        h[mask] = embeds
        return h

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(ids)
        if self.config.embed_scale != 1.0:
            # Rounded to float32, then to the model dtype, as the reference does.
            h = h * torch.tensor(self.config.embed_scale, dtype=torch.float32).to(h.dtype)
        return h

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits [n, vocab] for hidden states [n, hidden]."""
        return self.lm_head(hidden).float()

    def weight_sources(self) -> WeightSources:
        c = self.config
        hid = c.hidden_size
        src: WeightSources = {
            "embed_tokens.weight": [("model.embed_tokens.weight", (c.vocab_size, hid))],
            "norm.weight": [("model.norm.weight", (hid,))],
        }
        if not c.tie_word_embeddings:
            src["lm_head.weight"] = [("lm_head.weight", (c.vocab_size, hid))]
        for i in range(c.num_layers):
            ours, hf = f"layers.{i}.", f"model.layers.{i}."
            src.update(layer_weight_sources(c, ours, hf))
            for norm in ("input_layernorm", "post_attention_layernorm"):
                src[f"{ours}{norm}.weight"] = [(f"{hf}{norm}.weight", (hid,))]
        return src


def layer_weight_sources(c: ModelConfig, ours: str, hf: str) -> WeightSources:
    """The attention and MLP weights of one decoder layer (not its norms): our parameters under
    `ours`, the checkpoint's Llama-named tensors under `hf`."""
    hid, inter, d = c.hidden_size, c.intermediate_size, c.head_dim
    q, kv = c.num_heads * d, c.num_kv_heads * d
    attn = hf + "self_attn."
    src: WeightSources = {}
    qkv = [(attn + "q_proj", q), (attn + "k_proj", kv), (attn + "v_proj", kv)]
    src[ours + "self_attn.qkv_proj.weight"] = [(n + ".weight", (o, hid)) for n, o in qkv]
    if c.qkv_bias:
        src[ours + "self_attn.qkv_proj.bias"] = [(n + ".bias", (o,)) for n, o in qkv]
    src[ours + "self_attn.o_proj.weight"] = [(attn + "o_proj.weight", (hid, q))]
    if c.o_bias:
        src[ours + "self_attn.o_proj.bias"] = [(attn + "o_proj.bias", (hid,))]
    src[ours + "mlp.gate_up_proj.weight"] = [
        (hf + "mlp.gate_proj.weight", (inter, hid)),
        (hf + "mlp.up_proj.weight", (inter, hid)),
    ]
    src[ours + "mlp.down_proj.weight"] = [(hf + "mlp.down_proj.weight", (hid, inter))]
    return src
