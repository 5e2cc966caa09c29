"""`--image-backend torch`: transformers' torchvision-backend arithmetic on CPU.

Its resize is torch's antialiased uint8 kernel; the tests hold it to the documented tolerance
from PIL's (a frame shrunk to the model's input: one level, two at a sharp edge, in under 2% of
values; 640x480 camera frames: one level), and its normalisation, crop and padding to that
backend's float32 arithmetic spelled out with plain torch ops, bit for bit. The
PIL backend keeps its digest, so image hashes clients hold stay valid; the two backends never
share a hash.
"""

from __future__ import annotations

import base64
import dataclasses
import json

import numpy as np
import pytest
import xxhash

from tests.support.images import encode, random_rgb, smooth_rgb
from tests.support.preprocessors import apply_preprocessor, as_preprocessor
from tests.support.torchvision_backend import torchvision_backend
from tests.unit.multimodal.test_mm_fast_path import CONFIGS, LLAVA, SIZES
from vla_frames.image_hash import format_mm_hash, image_hash
from vla_server.bench.multimodal import camera_frames
from vla_server.multimodal.image_input import MediaPolicy, load_image
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.preprocess import resized_hw
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.policies.openvla.prismatic_preprocess import PrismaticPreprocess


def on_torch(cfg):
    return dataclasses.replace(cfg, resize_backend="torch")


def frames():
    for index, (height, width) in enumerate(SIZES):
        yield (
            index,
            (random_rgb(height, width, seed=index) if index % 2 else smooth_rgb(height, width)),
        )


@pytest.mark.parametrize("name", sorted(LLAVA))
def test_torch_backend_is_transformers_torchvision_arithmetic_bit_for_bit(name):
    cfg = on_torch(CONFIGS[name])
    for index, pixels in frames():
        ours = apply_preprocessor(pixels, cfg)
        assert ours.dtype == np.float32 and ours.flags.c_contiguous
        assert ours.tobytes() == torchvision_backend(pixels, cfg).tobytes(), index


def test_torch_padding_puts_the_odd_row_at_the_bottom():
    cfg = on_torch(PreprocessConfig.from_dict(
        {"image_processor_type": "CLIPImageProcessor", "size": 9, "crop_size": 12,
         "do_normalize": False, "do_rescale": False}))  # fmt: skip
    ones = np.full((9, 9, 3), 255, np.uint8)
    torch_rows = apply_preprocessor(ones, cfg)[0].max(axis=1)
    pil_rows = apply_preprocessor(ones, dataclasses.replace(cfg, resize_backend="pil"))[0].max(
        axis=1
    )
    assert torch_rows.tolist() == [0.0] + [255.0] * 9 + [0.0] * 2
    assert pil_rows.tolist() == [0.0] * 2 + [255.0] * 9 + [0.0]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_shrunk_frame_is_within_two_levels_of_pil(name):
    cfg = CONFIGS[name]
    worst, differing, total = 0.0, 0, 0
    for _, pixels in frames():
        if not shrinks(pixels.shape[:2], cfg):
            continue
        levels = level_differences(pixels, cfg)
        worst = max(worst, float(levels.max()))
        differing += int((levels > 1e-3).sum())
        total += levels.size
    assert total > 0
    # Two at a sharp edge (a letterbox border), else one; float32 rounding aside.
    assert worst <= 2.0 + 1e-3
    assert differing / total < 0.02


@pytest.mark.parametrize("name", ["siglip-224-bicubic", "clip-crop", "openvla-fused"])
def test_camera_frames_are_within_one_level_of_pil(name):
    cfg = CONFIGS[name]
    for index, frame in enumerate(camera_frames(4, 640, 480, 90, seed=3)):
        pixels = load_image(frame, 0, MediaPolicy())
        levels = level_differences(pixels, cfg)
        assert levels.max() <= 1.0 + 1e-3, index
        assert (levels > 1e-3).mean() < 0.01, index


def shrinks(hw: tuple[int, int], cfg) -> bool:
    """Whether every resize of the frame makes both sides smaller (the camera-frame case)."""
    if isinstance(cfg, PrismaticPreprocess):
        side = max(hw) if cfg.letterbox_fill is not None else None
        sizes = [t.size if isinstance(t.size, tuple) else (t.size, t.size) for t in cfg.towers]
        source = (side, side) if side else hw
        return all(h < source[0] and w < source[1] for h, w in sizes)
    return all(new < old for new, old in zip(resized_hw(*hw, cfg), hw, strict=True))


def level_differences(pixels: np.ndarray, cfg) -> np.ndarray:
    """|PIL backend - torch backend| of the preprocessed frame, in uint8 levels."""
    pil, fast = apply_preprocessor(pixels, cfg), apply_preprocessor(pixels, on_torch(cfg))
    assert pil.shape == fast.shape
    return np.abs(pil.astype(np.float64) - fast) / one_level(cfg)[:, None, None]


def one_level(cfg) -> np.ndarray:
    """How far one uint8 level moves each output channel: rescale / std."""
    if isinstance(cfg, PrismaticPreprocess):
        return np.array([1 / 255 / s for t in cfg.towers for s in t.std])
    rescale = cfg.rescale_factor or 1.0
    std = np.asarray(cfg.image_std) if cfg.image_std is not None else np.ones(3)
    return rescale / std


def test_the_check_sees_a_two_level_difference():
    cfg = CONFIGS["siglip-224-bicubic"]
    pixels = smooth_rgb(480, 640)
    shifted = pixels.astype(np.int16)
    shifted[100:110, 100:110] += 8
    far = apply_preprocessor(np.clip(shifted, 0, 255).astype(np.uint8), on_torch(cfg))
    levels = np.abs(apply_preprocessor(pixels, cfg) - far) / one_level(cfg)[:, None, None]
    assert levels.max() > 2.5


def test_pil_digest_is_unchanged_and_the_backends_never_share_a_hash():
    cfg = CONFIGS["clip-crop"]
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "resize_backend"}
    before = xxhash.xxh3_128_digest(
        json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    )
    assert cfg.digest() == before
    assert on_torch(cfg).digest() != before
    prismatic = CONFIGS["openvla-fused"]
    assert on_torch(prismatic).digest() != prismatic.digest()


@pytest.mark.parametrize("name", ["siglip-224-bicubic", "openvla-fused"])
def test_torch_pipeline_hashes_and_preprocesses_the_decoded_array(name):
    cfg = on_torch(CONFIGS[name])
    pipeline = ImagePipeline(MediaPolicy(), as_preprocessor(cfg))
    assert pipeline.reads_arrays
    for index, pixels in frames():
        data = encode(pixels, "JPEG", quality=90)
        decoded = load_image(data, 0, pipeline.policy)
        expected = apply_preprocessor(np.array(decoded), cfg)
        server = pipeline.process([base64.b64encode(data).decode()])[0]
        (caller,) = pipeline.process([data], [format_mm_hash(9)])
        assert server.hash128 == image_hash(decoded, cfg.digest()), index
        assert caller.hash128 == 9 and caller.caller_hash
        for result in (server, caller):
            assert result.pixel_values.tobytes() == expected.tobytes(), index
            assert result.source_hw == decoded.shape[:2]
