"""openvla-7b in bf16 fits a 24 GB GPU with room for KV: the node's own modules for its
published config and its towers' real sizes, built on the meta device and counted."""

from __future__ import annotations

import json

import torch

from vla_server.mem_cache.kv_pool import TokenToKVPool
from vla_server.model.llama import LlamaForCausalLM
from vla_server.policies.openvla.prismatic_config import PrismaticSpec
from vla_server.policies.openvla.prismatic_vision import PrismaticVisionEncoder
from vla_server.policies.registry import detect

# openvla-7b's config.json, less norm_stats; text_config holds only what differs from
# LlamaConfig's defaults (Llama-2-7B's sizes), as transformers saved it.
OPENVLA_7B = {
    "architectures": ["OpenVLAForActionPrediction"],
    "auto_map": {"AutoConfig": "configuration_prismatic.OpenVLAConfig"},
    "model_type": "openvla",
    "vision_backbone_id": "dinosiglip-vit-so-224px",
    "llm_backbone_id": "llama2-7b-pure",
    "arch_specifier": "no-align+fused-gelu-mlp",
    "use_fused_vision_backbone": True,
    "image_resize_strategy": "resize-naive",
    "image_sizes": [224, 224],
    "timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
    "timm_override_act_layers": [None, None],
    "pad_token_id": 32000,
    "pad_to_multiple_of": 64,
    "n_action_bins": 256,
    "text_config": {
        "model_type": "llama",
        "pad_token_id": 32000,
        "torch_dtype": "bfloat16",
        "vocab_size": 32064,
    },
    "torch_dtype": "bfloat16",
}
GIB = 1 << 30


def tower_shapes(name: str, dim: int, depth: int, mlp: int) -> dict[str, tuple[int, ...]]:
    prefix = f"vision_backbone.{name}."
    return {
        prefix + "patch_embed.proj.weight": (dim, 3, 14, 14),
        prefix + "pos_embed": (1, 256, dim),
        prefix + "blocks.0.mlp.fc1.weight": (mlp, dim),
        prefix + f"blocks.{depth - 1}.norm1.weight": (dim,),
    }


def nbytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def test_openvla_7b_in_bf16_leaves_a_24_gb_gpu_room_for_kv(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(OPENVLA_7B))
    config = detect(tmp_path).decoder_config()
    assert (config.hidden_size, config.num_layers, config.vocab_size) == (4096, 32, 32064)
    llm = LlamaForCausalLM(config, dtype=torch.bfloat16, device="meta")
    shapes = tower_shapes("featurizer", 1024, 24, 4096)  # ViT-L/14 DINOv2 + 4 registers
    shapes |= tower_shapes("fused_featurizer", 1152, 27, 4304)  # SigLIP so400m/14
    spec = PrismaticSpec.from_config(OPENVLA_7B)
    vision = PrismaticVisionEncoder(spec, shapes, dtype=torch.bfloat16, device="meta")
    assert vision.num_image_tokens == 256
    weights = nbytes(llm) + nbytes(vision)
    print(f"openvla-7b weights in bf16: {weights / GIB:.2f} GiB")
    assert 13.5 * GIB < weights < 14.5 * GIB  # about 7.5e9 parameters at 2 bytes
    per_token = TokenToKVPool.bytes_per_token(32, 32, 128, torch.bfloat16)
    assert per_token == 512 * 1024
    # 2 GiB for the CUDA context and activations; the rest of 24 GB holds this many tokens
    kv_tokens = (24e9 - weights - 2 * GIB) // per_token
    print(f"KV room on a 24 GB GPU: {kv_tokens:.0f} tokens")
    # four full 2048-token contexts; an OpenVLA request (BOS, 256 patches, prompt, 7 actions
    # tokens) needs about 290
    assert kv_tokens >= 4 * 2048
