"""Triton rotary embedding against transformers' Llama rotary module and apply_rotary_pos_emb."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from tests.support.kernel_testing import DEVICE, assert_close
from vla_kernels.rotary import rotary_cos_sin_cache, rotary_embedding, rotary_embedding_reference

pytest.importorskip("triton")

MAX_POS = 512
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 128,
}


def _hf_rotary(head_dim: int, rope_parameters: dict) -> LlamaRotaryEmbedding:
    config = LlamaConfig(
        hidden_size=head_dim * 8,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=MAX_POS,
        rope_parameters=rope_parameters,
    )
    return LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("head_dim", "rope"),
    [(64, {"rope_type": "default", "rope_theta": 10000.0}), (80, LLAMA3_ROPE), (128, LLAMA3_ROPE)],
    ids=["d64-default", "d80-llama3", "d128-llama3"],
)
def test_rotary_matches_llama(head_dim, rope, dtype):
    gen = torch.Generator().manual_seed(head_dim)
    positions = torch.tensor([0, 1, 5, 130, 511, 77])
    q = torch.randn((6, 8, head_dim), generator=gen).to(dtype)
    k = torch.randn((6, 2, head_dim), generator=gen).to(dtype)
    hf = _hf_rotary(head_dim, rope)
    # transformers' layout is [batch, heads, seq, dim]; ours is [tokens, heads, dim].
    cos, sin = hf(q.transpose(0, 1)[None].float(), positions[None])
    q_hf, k_hf = apply_rotary_pos_emb(
        q.transpose(0, 1)[None].float(), k.transpose(0, 1)[None].float(), cos, sin
    )
    expected_q, expected_k = q_hf[0].transpose(0, 1), k_hf[0].transpose(0, 1)
    cache = rotary_cos_sin_cache(hf.inv_freq, MAX_POS, hf.attention_scaling).to(DEVICE)
    q_out, k_out = rotary_embedding(positions.to(DEVICE), q.to(DEVICE), k.to(DEVICE), cache)
    assert q_out.dtype == dtype and k_out.dtype == dtype
    assert_close(q_out, expected_q)
    assert_close(k_out, expected_k)
    q_ref, k_ref = rotary_embedding_reference(positions, q, k, cache.cpu())
    assert_close(q_ref, expected_q)
    assert_close(k_ref, expected_k)
