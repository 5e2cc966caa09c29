"""The main process's cache of preprocessed frames: a repeated frame skips its resize and gets the
very pixels a fresh preprocessing gives; the very same encoded bytes skip the decode as well,
while anything else (other bytes of the same picture, bad bytes) is decoded."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from tests.support.images import png_base64, random_rgb
from tests.support.preprocessors import as_preprocessor
from vla_frames.image_errors import ImageInputError
from vla_frames.image_hash import format_mm_hash
from vla_server.multimodal import image_pipeline
from vla_server.multimodal.image_input import MediaPolicy
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.pixel_cache import PixelCache
from vla_server.multimodal.preprocess_config import PreprocessConfig

SIGLIP = PreprocessConfig.from_dict(
    {"image_processor_type": "SiglipImageProcessor", "size": {"height": 32, "width": 32}}
)
ENTRY = 3 * 32 * 32 * 4  # bytes of one preprocessed frame


def test_least_recently_used_goes_first_within_the_byte_budget():
    cache = PixelCache(3 * 400)
    arrays = {k: np.full(100, k, dtype=np.float32) for k in range(4)}  # 400 bytes each
    for k in range(3):
        cache.put(k, arrays[k])
    assert cache.get(0) is arrays[0]  # 0 is now the most recent
    cache.put(3, arrays[3])  # over budget: 1, the least recent, goes
    assert cache.get(1) is None
    assert [cache.get(k) is arrays[k] for k in (0, 2, 3)] == [True, True, True]
    assert cache.stats() == {
        "entries": 3,
        "bytes": 1200,
        "hits": 4,
        "misses": 1,
        "decodes_skipped": 0,
    }
    with pytest.raises(ValueError):
        arrays[0][0] = 1.0  # stored read-only: every hit shares it
    cache.put(9, np.zeros(1000, dtype=np.float32))  # larger than the whole budget: not kept
    assert cache.get(9) is None and cache.stats()["entries"] == 3


def test_repeated_frame_gets_the_cached_pixels_equal_to_fresh_ones():
    cached = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP), PixelCache(10 * ENTRY))
    fresh = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP))
    frames = [png_base64(random_rgb(48, 64, seed=s)) for s in (1, 2)]
    first = cached.process([frames[0]])[0]
    again = cached.process([frames[0]])[0]
    other = cached.process([frames[1]])[0]
    assert again.pixel_values is first.pixel_values  # not recomputed
    assert again.hash128 == first.hash128 and again.source_hw == (48, 64)
    np.testing.assert_array_equal(again.pixel_values, fresh.process([frames[0]])[0].pixel_values)
    assert other.hash128 != first.hash128
    np.testing.assert_array_equal(other.pixel_values, fresh.process([frames[1]])[0].pixel_values)
    assert cached.cache is not None and cached.cache.stats()["hits"] == 1


def test_a_caller_hash_names_the_cached_pixels_but_the_bytes_are_still_checked():
    pipeline = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP), PixelCache(10 * ENTRY))
    frame = png_base64(random_rgb(40, 40, seed=3))
    mm_hash = format_mm_hash(0x1234)
    first = pipeline.process([frame], [mm_hash])[0]
    other_frame = png_base64(random_rgb(40, 40, seed=4))
    # the caller's hash is the identity: another frame under it gets the stored pixels
    assert pipeline.process([other_frame], [mm_hash])[0].pixel_values is first.pixel_values
    garbage = base64.b64encode(b"\x89PNG\r\n\x1a\n not an image").decode()
    with pytest.raises(ImageInputError):
        pipeline.process([garbage], [mm_hash])


def test_the_same_encoded_bytes_skip_the_decode_other_bytes_do_not(monkeypatch):
    pipeline = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP), PixelCache(10 * ENTRY))
    picture = random_rgb(48, 64, seed=5)
    frame = png_base64(picture)
    first = pipeline.process([frame])[0]
    decodes: list[bytes] = []
    real = image_pipeline.decode_payload
    monkeypatch.setattr(
        image_pipeline, "decode_payload", lambda d, i, p: decodes.append(d) or real(d, i, p)
    )
    again = pipeline.process([f"data:image/png;base64,{frame}"])[0]  # the same file bytes
    assert decodes == [] and again.pixel_values is first.pixel_values
    assert (again.hash128, again.source_hw) == (first.hash128, (48, 64))
    # the same picture in other bytes is decoded, and lands on the same cached pixels
    out = io.BytesIO()
    Image.fromarray(picture).save(out, "PNG", compress_level=1)
    recoded = base64.b64encode(out.getvalue()).decode()
    assert base64.b64decode(recoded) != base64.b64decode(frame)
    assert pipeline.process([recoded])[0].pixel_values is first.pixel_values and len(decodes) == 1
    assert pipeline.cache is not None and pipeline.cache.stats()["decodes_skipped"] == 1
    garbage = base64.b64encode(b"\x89PNG\r\n\x1a\n not an image").decode()
    for _ in range(2):  # a failed decode is never remembered
        with pytest.raises(ImageInputError):
            pipeline.process([garbage])


def test_known_bytes_whose_pixels_were_evicted_are_decoded_again():
    pipeline = ImagePipeline(
        MediaPolicy(), as_preprocessor(SIGLIP), PixelCache(ENTRY)
    )  # room for one frame
    frames = [png_base64(random_rgb(32, 32, seed=s)) for s in (6, 7)]
    first = pipeline.process([frames[0]])[0]
    pipeline.process([frames[1]])  # evicts the first frame's pixels
    again = pipeline.process([frames[0]])[0]
    assert again.pixel_values is not first.pixel_values
    np.testing.assert_array_equal(again.pixel_values, first.pixel_values)
    assert pipeline.cache is not None and pipeline.cache.stats()["decodes_skipped"] == 0


def test_bytes_sent_under_a_caller_hash_never_name_pixels_for_a_request_without_one():
    pipeline = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP), PixelCache(10 * ENTRY))
    fresh = ImagePipeline(MediaPolicy(), as_preprocessor(SIGLIP))
    first, second = (png_base64(random_rgb(40, 40, seed=s)) for s in (8, 9))
    claimed = format_mm_hash(0x5678)
    pipeline.process([first], [claimed])
    pipeline.process([second], [claimed])  # the caller says: the same picture as the first
    own = pipeline.process([second])[0]  # no claim: the second frame's own pixels
    np.testing.assert_array_equal(own.pixel_values, fresh.process([second])[0].pixel_values)
    assert own.hash128 == fresh.process([second])[0].hash128
