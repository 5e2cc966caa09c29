"""Image identity: the documented hash, caller hashes, pad ids, and the per-request pipeline."""

from __future__ import annotations

import base64
import hashlib
import struct

import numpy as np
import pytest
import torch
import xxhash

from tests.support.images import encode, random_rgb
from tests.support.preprocessors import as_preprocessor
from vla_frames.image_errors import ImageInputError
from vla_frames.image_hash import (
    format_mm_hash,
    image_hash,
    pad_ids_for_image,
    parse_mm_hash,
)
from vla_server.multimodal.image_input import MediaPolicy
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.preprocess import preprocess_image
from vla_server.multimodal.preprocess_config import PreprocessConfig

SIGLIP = PreprocessConfig.from_dict(
    {"image_processor_type": "SiglipImageProcessor", "size": {"height": 32, "width": 32}}
)
CLIP = PreprocessConfig.from_dict(
    {"image_processor_type": "CLIPImageProcessor", "size": 32, "crop_size": 32}
)


def documented_hash(pixels: np.ndarray, digest: bytes) -> int:
    """The image_hash docstring, implemented the way the ROS bridge would at the edge."""
    height, width, channels = pixels.shape
    message = b"vla-image-v1\0" + struct.pack("<III", height, width, channels) + digest
    return int(xxhash.xxh3_128(message + pixels.tobytes()).hexdigest(), 16)


def test_hash_follows_the_documented_byte_layout():
    for seed, (height, width) in enumerate([(1, 1), (7, 5), (480, 640)]):
        pixels = random_rgb(height, width, seed)
        for cfg in (SIGLIP, CLIP):
            assert image_hash(pixels, cfg.digest()) == documented_hash(pixels, cfg.digest())
    pixels = random_rgb(6, 4)
    assert image_hash(np.asfortranarray(pixels), SIGLIP.digest()) == image_hash(
        pixels, SIGLIP.digest()
    )


def test_one_pixel_shape_and_preprocessing_all_change_the_hash():
    pixels = random_rgb(12, 16)
    base = image_hash(pixels, SIGLIP.digest())
    changed = pixels.copy()
    changed[11, 15, 2] ^= 1
    assert image_hash(changed, SIGLIP.digest()) != base
    assert image_hash(pixels.reshape(16, 12, 3), SIGLIP.digest()) != base  # same bytes
    assert image_hash(pixels, CLIP.digest()) != base
    assert base == image_hash(pixels.copy(), SIGLIP.digest())


def test_hash_rejects_non_rgb_input():
    with pytest.raises(ValueError, match="uint8"):
        image_hash(np.zeros((4, 4), np.uint8), SIGLIP.digest())
    with pytest.raises(ValueError, match="16 bytes"):
        image_hash(random_rgb(2, 2), b"short")


def test_same_pixels_through_every_form_give_one_hash():
    pixels = random_rgb(20, 30, seed=7)
    png = encode(pixels, "PNG")
    text = base64.b64encode(png).decode()
    raw = {"shape": [20, 30, 3], "dtype": "uint8", "data": base64.b64encode(pixels.tobytes())}
    raw["data"] = raw["data"].decode()
    forms = [png, text, f"data:image/png;base64,{text}", raw, pixels]
    results = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP)).process(forms)
    expected = documented_hash(pixels, SIGLIP.digest())
    assert [r.hash128 for r in results] == [expected] * len(forms)
    assert not any(r.caller_hash for r in results)
    for result in results:
        assert result.source_hw == (20, 30)
        np.testing.assert_array_equal(result.pixel_values, preprocess_image(pixels, SIGLIP))


def test_caller_hashes_are_used_as_given_and_validated():
    pipeline = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP))
    images = [random_rgb(4, 4, 1), random_rgb(4, 4, 2)]
    given = ["00000000000000000000000000000001", "ABCDEF0123456789abcdef0123456789"]
    results = pipeline.process(images, given)
    assert [r.hash128 for r in results] == [1, 0xABCDEF0123456789ABCDEF0123456789]
    assert all(r.caller_hash for r in results)
    assert pipeline.process(images[:1], given[0])[0].hash128 == 1  # a bare string, one image
    with pytest.raises(ImageInputError, match=r"^mm_hashes: has 1 entries for 2 images"):
        pipeline.process(images, given[:1])
    with pytest.raises(ImageInputError, match=r"^mm_hashes: has 3 entries for 2 images"):
        pipeline.process(images, [*given, given[0]])
    with pytest.raises(ImageInputError, match=r"^mm_hashes\[1\]: .*non-hex character 'g'"):
        pipeline.process(images, [given[0], "g" * 32])


def test_parse_and_format_mm_hash():
    for value in (0, 1, (1 << 128) - 1, 0x0123456789ABCDEF0123456789ABCDEF):
        text = format_mm_hash(value)
        assert len(text) == 32 and text == text.lower()
        assert parse_mm_hash(text) == value
        assert parse_mm_hash(text.upper()) == value
    bad = {
        "0" * 31: "got 31 characters",
        "0" * 33: "got 33 characters",
        "0x" + "0" * 30: "non-hex character 'x'",
        " " + "0" * 31: "non-hex character ' '",
        "": "got 0 characters",
    }
    for text, fragment in bad.items():
        with pytest.raises(ValueError, match=fragment):
            parse_mm_hash(text)
    with pytest.raises(ValueError, match="hex string"):
        parse_mm_hash(123)  # type: ignore[arg-type]


def documented_pad_ids(hash128: int, n_tokens: int, vocab_size: int) -> list[int]:
    digest = hashlib.blake2b(
        hash128.to_bytes(16, "big"), digest_size=32, person=b"vla-mm-pad-v1"
    ).digest()
    words = [int.from_bytes(digest[i : i + 8], "big") % (1 << 62) for i in range(0, 32, 8)]
    return [vocab_size + words[i % 4] for i in range(n_tokens)]


def test_pad_ids_properties():
    vocab_size = 32_000
    rng = np.random.default_rng(0)
    hashes = [int.from_bytes(rng.bytes(16), "big") for _ in range(200)] + [0, (1 << 128) - 1]
    firsts = set()
    for h in hashes:
        ids = pad_ids_for_image(h, 10, vocab_size)
        assert ids == documented_pad_ids(h, 10, vocab_size)
        assert ids == pad_ids_for_image(h, 10, vocab_size)
        assert len(ids) == 10 and len(set(ids[:4])) == 4 and ids[4:8] == ids[:4]
        assert all(vocab_size <= i < vocab_size + (1 << 62) for i in ids)
        assert torch.tensor(ids, dtype=torch.int64).tolist() == ids  # fits int64
        firsts.add(ids[0])
    assert len(firsts) == len(hashes)  # different images diverge at the first image token
    assert pad_ids_for_image(5, 0, vocab_size) == []
    assert pad_ids_for_image(5, 3, vocab_size) == pad_ids_for_image(5, 7, vocab_size)[:3]


def test_pad_ids_reject_out_of_range_inputs():
    with pytest.raises(ValueError, match="128-bit"):
        pad_ids_for_image(1 << 128, 4, 100)
    with pytest.raises(ValueError, match="128-bit"):
        pad_ids_for_image(-1, 4, 100)
    with pytest.raises(ValueError, match="vocab_size"):
        pad_ids_for_image(1, 4, 0)
