"""Preprocessing equals transformers' own PIL image processors on the same pixels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models
from transformers import (
    CLIPImageProcessorPil,
    LlavaProcessor,
    PreTrainedTokenizerFast,
    SiglipImageProcessorPil,
)

from tests.support.images import random_rgb, smooth_rgb
from vla_server.multimodal.preprocess import preprocess_image
from vla_server.multimodal.preprocess_config import PreprocessConfig

SIZES = [(480, 640), (224, 224), (37, 301), (300, 17)]

PROCESSORS = {
    "siglip-224-bicubic": lambda: SiglipImageProcessorPil(),
    "siglip-64x96-bilinear": lambda: SiglipImageProcessorPil(
        size={"height": 64, "width": 96}, resample=2, image_mean=[0.4, 0.5, 0.6]
    ),
    "clip-224-crop": lambda: CLIPImageProcessorPil(),
    "clip-short-48-crop-56": lambda: CLIPImageProcessorPil(
        size={"shortest_edge": 48}, crop_size={"height": 56, "width": 40}
    ),
    "clip-no-crop-no-normalise": lambda: CLIPImageProcessorPil(
        size={"shortest_edge": 32}, do_center_crop=False, do_normalize=False
    ),
}


def reference(processor: object, pixels: np.ndarray) -> np.ndarray:
    return processor(images=[pixels], return_tensors="np")["pixel_values"][0]


@pytest.mark.parametrize("name", sorted(PROCESSORS))
def test_matches_transformers_pil_processor(tmp_path: Path, name: str):
    processor = PROCESSORS[name]()
    processor.save_pretrained(tmp_path)
    cfg = PreprocessConfig.from_folder(tmp_path)
    for index, (height, width) in enumerate(SIZES):
        for pixels in (random_rgb(height, width, seed=index), smooth_rgb(height, width)):
            expected = reference(processor, pixels)
            ours = preprocess_image(pixels, cfg)
            assert ours.dtype == np.float32 and ours.flags.c_contiguous
            assert ours.shape == expected.shape
            np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)


def test_reads_the_image_processor_nested_in_processor_config(tmp_path: Path):
    vocab = {"<unk>": 0, "<image>": 1, "a": 2}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")), unk_token="<unk>"
    )
    image_processor = SiglipImageProcessorPil(size={"height": 32, "width": 48})
    LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(tmp_path)
    assert not (tmp_path / "preprocessor_config.json").exists()
    assert "image_processor" in json.loads((tmp_path / "processor_config.json").read_text())
    cfg = PreprocessConfig.from_folder(tmp_path)
    pixels = random_rgb(50, 70)
    np.testing.assert_allclose(
        preprocess_image(pixels, cfg), reference(image_processor, pixels), rtol=0, atol=1e-6
    )


def test_legacy_int_sizes_mean_shortest_edge_and_square_crop(tmp_path: Path):
    raw = {"image_processor_type": "CLIPImageProcessor", "size": 40, "crop_size": 36}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(raw))
    cfg = PreprocessConfig.from_folder(tmp_path)
    assert cfg.shortest_edge == 40 and cfg.crop_hw == (36, 36)
    processor = CLIPImageProcessorPil(size=40, crop_size=36)
    pixels = random_rgb(90, 60)
    np.testing.assert_allclose(
        preprocess_image(pixels, cfg), reference(processor, pixels), rtol=0, atol=1e-6
    )


def test_unsupported_configs_are_named(tmp_path: Path):
    with pytest.raises(ValueError, match="unsupported image_processor_type 'BlipImageProcessor'"):
        PreprocessConfig.from_dict({"image_processor_type": "BlipImageProcessor"})
    with pytest.raises(ValueError, match="unsupported image processor size"):
        PreprocessConfig.from_dict(
            {"image_processor_type": "SiglipImageProcessor", "size": {"longest_edge": 9}}
        )
    with pytest.raises(FileNotFoundError, match="no preprocessor_config.json"):
        PreprocessConfig.from_folder(tmp_path)


def test_fast_and_pil_class_names_share_the_settings():
    base = {"size": {"height": 32, "width": 32}}
    configs = [
        PreprocessConfig.from_dict(base | {"image_processor_type": name})
        for name in ("SiglipImageProcessor", "SiglipImageProcessorFast", "SiglipImageProcessorPil")
    ]
    assert configs[0] == configs[1] == configs[2]


def test_digest_changes_with_every_setting_and_only_then():
    base = {"image_processor_type": "CLIPImageProcessor"}
    variants = [
        {},
        {"size": {"shortest_edge": 336}},
        {"crop_size": {"height": 200, "width": 224}},
        {"resample": 2},
        {"do_center_crop": False},
        {"rescale_factor": 1 / 127.5},
        {"image_mean": [0.5, 0.5, 0.5]},
        {"image_std": [0.5, 0.5, 0.4]},
        {"do_normalize": False},
        {"image_processor_type": "SiglipImageProcessor"},
    ]
    digests = [PreprocessConfig.from_dict(base | v).digest() for v in variants]
    assert all(len(d) == 16 for d in digests)
    assert len(set(digests)) == len(variants)
    explicit_defaults = {"resample": 3, "do_resize": True, "crop_size": 224} | base
    assert PreprocessConfig.from_dict(explicit_defaults).digest() == digests[0]
