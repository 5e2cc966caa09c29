"""Prismatic/OpenVLA image preprocessing against the reference's PIL port of
`PrismaticImageProcessor` (`tests.support.prismatic_ref.reference.pixel_values`), on the
published `preprocessor_config.json` shape: resize-naive and letterbox, one and two towers,
square, landscape, portrait and odd-sized frames."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tests.support.prismatic_ref.reference import pixel_values
from vla_server.policies.openvla.family import OpenVLAFamily
from vla_server.policies.openvla.prismatic_preprocess import (
    PrismaticPreprocess,
    prismatic_preprocess,
)

DINO = ([0.484375, 0.455078125, 0.40625], [0.228515625, 0.2236328125, 0.224609375])
SIGLIP = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
SIZES = [(224, 224), (480, 640), (481, 641), (640, 480), (100, 300), (37, 500)]


def published(strategy: str, towers: list[tuple[list[float], list[float]]]) -> dict:
    """A preprocessor_config.json as OpenVLA publishes it (bf16-rounded DINOv2 mean/std)."""
    letterbox = strategy == "letterbox"
    size = 224 if letterbox else [224, 224]
    return {
        "image_processor_type": "PrismaticImageProcessor",
        "image_resize_strategy": strategy,
        "input_sizes": [[3, 224, 224]] * len(towers),
        "interpolations": ["bicubic"] * len(towers),
        "means": [m for m, _ in towers],
        "stds": [s for _, s in towers],
        "tvf_crop_params": [{"output_size": [224, 224]}] * len(towers),
        "tvf_do_letterbox": letterbox,
        "tvf_letterbox_fill": [int(x * 255) for x in towers[-1][0]] if letterbox else None,
        "tvf_normalize_params": [{"inplace": False, "mean": m, "std": s} for m, s in towers],
        "tvf_resize_params": [
            {"antialias": True, "interpolation": 3, "max_size": None, "size": size}
        ]
        * len(towers),
        "use_fused_vision_backbone": len(towers) == 2,
    }


def frame(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("strategy", ["resize-naive", "letterbox"])
@pytest.mark.parametrize("towers", [[DINO, SIGLIP], [SIGLIP]], ids=["fused", "single"])
def test_pixels_equal_the_reference_processor(strategy, towers):
    raw = published(strategy, towers)
    cfg = PrismaticPreprocess.from_dict(raw)
    for i, (h, w) in enumerate(SIZES):
        pixels = frame(h, w, seed=i)
        ours = prismatic_preprocess(pixels, cfg)
        reference = pixel_values(Image.fromarray(pixels), raw).numpy()
        assert ours.dtype == np.float32 and ours.flags.c_contiguous
        assert ours.shape == (3 * len(towers), 224, 224)
        np.testing.assert_array_equal(ours, reference)


def test_settings_derived_without_the_tvf_keys_match_the_saved_ones():
    for strategy in ("resize-naive", "letterbox"):
        raw = published(strategy, [DINO, SIGLIP])
        bare = {k: v for k, v in raw.items() if not k.startswith("tvf_")}
        assert PrismaticPreprocess.from_dict(bare) == PrismaticPreprocess.from_dict(raw)


def test_digest_changes_with_every_setting():
    naive = PrismaticPreprocess.from_dict(published("resize-naive", [DINO, SIGLIP]))
    letterbox = PrismaticPreprocess.from_dict(published("letterbox", [DINO, SIGLIP]))
    single = PrismaticPreprocess.from_dict(published("resize-naive", [SIGLIP]))
    assert len({naive.digest(), letterbox.digest(), single.digest()}) == 3


def test_folder_with_a_prismatic_processor_loads_it(tmp_path):
    import json

    raw = published("resize-naive", [DINO, SIGLIP])
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(raw))
    family = OpenVLAFamily(tmp_path, {"model_type": "openvla"})
    assert family.image_preprocessor("pil") == PrismaticPreprocess.from_dict(raw)


def test_unknown_resize_strategy_is_refused():
    raw = published("resize-naive", [SIGLIP]) | {"image_resize_strategy": "squash"}
    with pytest.raises(ValueError, match="image_resize_strategy 'squash'"):
        PrismaticPreprocess.from_dict(raw)
