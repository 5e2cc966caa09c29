"""What a Prismatic/OpenVLA config.json says about the vision half, and what it is refused for."""

from __future__ import annotations

import pytest

from vla_server.policies.openvla.prismatic_config import PrismaticSpec

OPENVLA = {
    "vision_backbone_id": "dinosiglip-vit-so-224px",
    "arch_specifier": "no-align+fused-gelu-mlp",
    "text_config": {"hidden_size": 4096},
}


def test_backbone_table_fills_what_the_config_leaves_out():
    spec = PrismaticSpec.from_config(OPENVLA)
    assert spec.timm_model_ids == (
        "vit_large_patch14_reg4_dinov2.lvd142m",
        "vit_so400m_patch14_siglip_224",
    )
    assert spec.fused and spec.image_sizes == (224, 224) and spec.projector == "fused-gelu-mlp"
    single = PrismaticSpec.from_config({**OPENVLA, "vision_backbone_id": "clip-vit-l"})
    assert not single.fused and single.act_overrides == ("quick_gelu",)


def test_saved_keys_win_over_the_backbone_table():
    ids = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_384"]
    spec = PrismaticSpec.from_config({**OPENVLA, "timm_model_ids": ids, "image_sizes": [384] * 2})
    assert spec.timm_model_ids == tuple(ids) and spec.image_sizes == (384, 384)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_base_patch16_224"]},
            r"timm_model_ids\[1\] 'vit_base_patch16_224' is not a supported tower",
        ),
        ({"timm_model_ids": ["vit_so400m_patch14_siglip_224"]}, "timm_model_ids has 1 entries"),
        ({"vision_backbone_id": "resnet-50"}, "'resnet-50' is not a Prismatic backbone"),
        ({"arch_specifier": "no-align+qformer"}, "names no supported projector"),
        ({"timm_override_act_layers": ["swish", None]}, "timm_override_act_layers"),
        ({"image_sizes": [224, 384]}, "differ between the towers"),
    ],
)
def test_configs_the_node_cannot_serve_are_refused_naming_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        PrismaticSpec.from_config({**OPENVLA, **change})
