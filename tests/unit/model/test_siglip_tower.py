"""The node's SigLIP tower (q/k/v fused) against transformers' own `SiglipVisionModel` on the
same random weights: the same last hidden state."""

from __future__ import annotations

import torch

from vla_server.model.hf_tower import TOWER_KEYS
from vla_server.model.siglip_tower import SiglipTower, fuse_qkv


def test_the_tower_computes_transformers_last_hidden_state():
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(0)
    config = SiglipVisionConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                num_attention_heads=3, image_size=42, patch_size=14,
                                vision_use_head=False)  # fmt: skip
    reference = SiglipVisionModel(config).eval()
    tower = SiglipTower({k: getattr(config, k) for k in TOWER_KEYS}).eval()
    state = {k.removeprefix("vision_model."): v for k, v in reference.state_dict().items()}
    fused = fuse_qkv(state)
    assert "encoder.layers.1.self_attn.qkv_proj.weight" in fused
    assert not any(".q_proj." in name for name in fused)
    tower.load_state_dict(fused, strict=True)
    pixels = torch.rand((2, 3, 42, 42)) * 2 - 1
    with torch.no_grad():
        expected = reference(pixel_values=pixels).last_hidden_state
        torch.testing.assert_close(tower(pixels), expected, atol=1e-5, rtol=1e-5)
