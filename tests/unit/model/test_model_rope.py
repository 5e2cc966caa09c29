"""Our RoPE variants against transformers' LlamaRotaryEmbedding on the same config."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from vla_server.model.rotary import RotaryEmbedding, apply_rotary
from vla_server.policies.registry import detect

MAX_POS = 64
VARIANTS = {
    "none": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 3.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "yarn-mscale": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "mscale": 0.707,
        "mscale_all_dim": 1.0,
        "beta_fast": 16,
        "truncate": False,
    },
    "yarn-attention-factor": {
        "rope_type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 32,
        "attention_factor": 1.3,
    },
    "old-format-linear": {"type": "linear", "factor": 1.5},
}


def configs(tmp_path, rope_scaling):
    hf = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=32,
        max_position_embeddings=MAX_POS,
        rope_theta=5000.0,
        rope_scaling=None if rope_scaling is None else dict(rope_scaling),
    )
    hf.save_pretrained(tmp_path)
    return hf, detect(tmp_path).decoder_config()


def reference(hf_config, positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """A fresh reference module, so dynamic scaling sees only this call's positions."""
    rotary = LlamaRotaryEmbedding(hf_config)
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, torch.tensor([positions]))
    return cos[0], sin[0]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cos_sin_match_reference(tmp_path, variant):
    hf_config, config = configs(tmp_path, VARIANTS[variant])
    ours = RotaryEmbedding(config, max_positions=4 * MAX_POS, device="cpu")
    half = config.head_dim // 2
    # Within the original length, and a sequence longer than max_position_embeddings.
    for length in (MAX_POS - 7, 3 * MAX_POS + 5):
        positions = torch.arange(length)
        ref_cos, ref_sin = reference(hf_config, positions.tolist())
        cos, sin = ours.cos_sin(positions, torch.full((length,), length))
        torch.testing.assert_close(cos, ref_cos[:, :half], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(sin, ref_sin[:, :half], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(ref_cos[:, half:], ref_cos[:, :half])  # rotate-half layout


def test_dynamic_scaling_is_per_request(tmp_path):
    """A decode token of a long request and a token of a short one share a batch: each gets the
    frequencies the reference uses for its own request length."""
    hf_config, config = configs(tmp_path, VARIANTS["dynamic"])
    ours = RotaryEmbedding(config, max_positions=4 * MAX_POS, device="cpu")
    long_len, short_len = 2 * MAX_POS + 3, 10
    positions = torch.tensor([long_len - 1, short_len - 1])
    cos, sin = ours.cos_sin(positions, torch.tensor([long_len, short_len]))
    half = config.head_dim // 2
    # The reference at decode time: cache of long_len - 1 tokens, one new position.
    for row, length in enumerate((long_len, short_len)):
        ref_cos, ref_sin = reference(hf_config, list(range(length)))
        torch.testing.assert_close(cos[row], ref_cos[-1, :half], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(sin[row], ref_sin[-1, :half], atol=1e-6, rtol=1e-5)


def test_apply_rotary_matches_reference(tmp_path):
    hf_config, config = configs(tmp_path, VARIANTS["yarn"])
    ours = RotaryEmbedding(config, max_positions=MAX_POS, device="cpu")
    g = torch.Generator().manual_seed(0)
    positions = torch.tensor([0, 5, 17, 63, 2])
    q = torch.randn(5, 4, config.head_dim, generator=g)
    k = torch.randn(5, 2, config.head_dim, generator=g)
    cos, sin = ours.cos_sin(positions)
    ref_cos, ref_sin = LlamaRotaryEmbedding(hf_config)(q, positions[None])
    # Reference layout: [batch, heads, seq, head_dim].
    ref_q, ref_k = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], ref_cos, ref_sin
    )
    torch.testing.assert_close(
        apply_rotary(q, cos, sin), ref_q[0].transpose(0, 1), atol=1e-6, rtol=1e-5
    )
    torch.testing.assert_close(
        apply_rotary(k, cos, sin), ref_k[0].transpose(0, 1), atol=1e-6, rtol=1e-5
    )


def test_unsupported_rope_type_is_refused(tmp_path):
    long_factor = [1.0] * 32
    scaling = {
        "rope_type": "longrope",
        "long_factor": long_factor,
        "short_factor": long_factor,
        "original_max_position_embeddings": 16,
    }
    with pytest.raises(NotImplementedError, match="longrope"):
        configs(tmp_path, scaling)
