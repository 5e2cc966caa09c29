"""The image fast path equals the reference path bit for bit: normalisation by value tables
equals the arithmetic they are built from, a decoded PIL image preprocesses exactly as its pixel
array does (no round trip through an array), and the hash is still the one over the pixels."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from tests.support.images import encode, random_rgb, smooth_rgb
from tests.support.preprocessors import Preprocessor, apply_preprocessor, as_preprocessor
from tests.unit.policies.test_prismatic_preprocess import DINO, SIGLIP, published
from vla_frames.image_hash import format_mm_hash, image_hash
from vla_server.multimodal.image_input import MediaPolicy, load_frame, load_image
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.preprocess import _center_crop, normalise, resized_hw
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.multimodal.value_tables import look_up, value_tables
from vla_server.policies.openvla.prismatic_preprocess import PrismaticPreprocess, tower_normalise

LLAVA = {
    "siglip-224-bicubic": {"image_processor_type": "SiglipImageProcessor"},
    "siglip-bilinear-mean": {
        "image_processor_type": "SiglipImageProcessor",
        "size": {"height": 40, "width": 56},
        "resample": 2,
        "image_mean": [0.1, 0.7, 0.33],
        "image_std": [0.9, 0.07, 0.31],
    },
    "clip-crop": {"image_processor_type": "CLIPImageProcessor", "size": 48, "crop_size": 40},
    "clip-no-rescale": {"image_processor_type": "CLIPImageProcessor", "do_rescale": False},
    "clip-plain": {"image_processor_type": "CLIPImageProcessor", "do_normalize": False},
}
CONFIGS: dict[str, Preprocessor] = {
    **{name: PreprocessConfig.from_dict(raw) for name, raw in LLAVA.items()},
    "openvla-fused": PrismaticPreprocess.from_dict(published("resize-naive", [DINO, SIGLIP])),
    "openvla-letterbox": PrismaticPreprocess.from_dict(published("letterbox", [SIGLIP])),
}
SIZES = [(480, 640), (224, 224), (37, 301), (300, 17), (1, 1), (719, 1281)]


def every_value_image(height: int, width: int, seed: int) -> np.ndarray:
    """Random uint8 CHW that holds each of the 256 values in every channel."""
    chw = np.random.default_rng(seed).integers(0, 256, (3, height, width), dtype=np.uint8)
    chw[:, 0, :256] = np.arange(256, dtype=np.uint8)
    return chw


@pytest.mark.parametrize("name", [n for n in CONFIGS if n in LLAVA])
def test_tables_equal_transformers_arithmetic_bit_for_bit(name):
    cfg = CONFIGS[name]
    tables = value_tables(lambda chw: normalise(chw, cfg))
    for seed, chw in enumerate([every_value_image(20, 300, 0), every_value_image(7, 256, 1)]):
        hwc_view = np.moveaxis(np.ascontiguousarray(np.moveaxis(chw, 0, -1)), -1, 0)
        for layout in (chw, hwc_view):  # the resize hands over a channel-last view
            ours = look_up(layout, tables)
            assert ours.dtype == np.float32 and ours.flags.c_contiguous, seed
            assert ours.tobytes() == normalise(layout, cfg).astype(np.float32).tobytes()


@pytest.mark.parametrize("tower", [0, 1])
def test_tables_equal_torchvision_arithmetic_bit_for_bit(tower):
    t = CONFIGS["openvla-fused"].towers[tower]
    chw = every_value_image(16, 260, tower)
    ours = look_up(chw, value_tables(lambda x: tower_normalise(x, t)))
    assert ours.tobytes() == tower_normalise(chw, t).tobytes()


def test_look_up_can_fail():
    cfg = CONFIGS["siglip-224-bicubic"]
    tables = value_tables(lambda chw: normalise(chw, cfg))
    tables[1, 7] = np.nextafter(tables[1, 7], np.float32(10))
    chw = every_value_image(4, 256, 0)
    assert look_up(chw, tables).tobytes() != normalise(chw, cfg).tobytes()


def old_array_path(pixels: np.ndarray, cfg: Preprocessor) -> np.ndarray:
    """The reference path spelled out: PIL resize of the array, crop, the arithmetic."""
    if isinstance(cfg, PrismaticPreprocess):
        return apply_preprocessor(pixels.copy(), cfg)  # array input, tables checked above
    height, width = resized_hw(*pixels.shape[:2], cfg)
    image = Image.fromarray(pixels).resize((width, height), resample=cfg.resample)
    chw = np.moveaxis(np.asarray(image), -1, 0)
    if cfg.crop_hw is not None:
        chw = _center_crop(chw, cfg.crop_hw, top_heavy=True)
    return np.ascontiguousarray(normalise(chw, cfg))


def encoded_forms(pixels: np.ndarray) -> dict[str, bytes]:
    grey = pixels[..., 0]
    rgba = np.concatenate([pixels, pixels[..., :1]], axis=-1)
    palette = Image.fromarray(pixels).quantize(16)
    forms = {
        "jpeg": encode(pixels, "JPEG", quality=90),
        "png": encode(pixels, "PNG"),
        "grey-png": encode(grey, "PNG"),
        "grey-jpeg": encode(grey, "JPEG"),
        "rgba-png": encode(rgba, "PNG"),
    }
    if min(pixels.shape[:2]) > 1:
        forms["exif-rotated-jpeg"] = exif_rotated(pixels)
    buffer = io.BytesIO()
    palette.save(buffer, "PNG")
    forms["palette-png"] = buffer.getvalue()
    return forms


def exif_rotated(pixels: np.ndarray) -> bytes:
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", exif=exif)
    return buffer.getvalue()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoded_frames_preprocess_as_their_pixel_arrays(name):
    cfg = CONFIGS[name]
    pipeline = ImagePipeline(MediaPolicy(), as_preprocessor(cfg))
    for index, (height, width) in enumerate(SIZES):
        pixels = random_rgb(height, width, seed=index) if index % 2 else smooth_rgb(height, width)
        for form, data in encoded_forms(pixels).items():
            decoded = load_image(data, 0, pipeline.policy)  # the reference path's pixels
            frame = load_frame(data, 0, pipeline.policy)
            assert isinstance(frame, Image.Image) and frame.mode == "RGB", form
            expected = old_array_path(np.array(decoded), cfg)
            assert apply_preprocessor(frame, cfg).tobytes() == expected.tobytes(), (form, index)
            server = pipeline.process([data, base64.b64encode(data).decode()])
            (caller,) = pipeline.process([data], [format_mm_hash(5)])
            for result in (*server, caller):
                assert result.pixel_values.tobytes() == expected.tobytes(), (form, index)
                assert result.source_hw == decoded.shape[:2]
            assert [r.hash128 for r in server] == [image_hash(decoded, cfg.digest())] * 2
            assert caller.hash128 == 5 and caller.caller_hash
