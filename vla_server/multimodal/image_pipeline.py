"""All main-process work for a request's images: parse, hash, preprocess (run it in a thread pool).

The scheduler only ever receives the results: float32 ``pixel_values`` and one 128-bit hash per
image. A frame seen recently (its hash in the ``PixelCache``) skips the resize and
normalisation; one whose encoded bytes are exactly those of a recent frame skips the decode and
hash as well. A caller's ``mm_hashes`` entry is used as given (no server hash is computed for
it); a list whose length differs from the number of images, or a malformed entry, is an error,
never a silent recompute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from vla_frames.image_decode import RgbFrame, as_pixels, frame_hw
from vla_frames.image_errors import ImageInputError
from vla_frames.image_hash import image_hash, parse_mm_hash
from vla_server.multimodal.image_input import (
    ImageItem,
    MediaPolicy,
    decode_payload,
    encoded_payload,
    load_frame,
)
from vla_server.multimodal.pixel_cache import KnownFrame, PixelCache
from vla_server.multimodal.preprocessor import ImagePreprocessor


@dataclass(frozen=True)
class ProcessedImage:
    pixel_values: np.ndarray  # float32 [C, H, W]: 3 per vision tower
    hash128: int
    source_hw: tuple[int, int]  # decoded size before preprocessing
    caller_hash: bool  # True: hash128 came from the request's mm_hashes


@dataclass(frozen=True)
class ImagePipeline:
    policy: MediaPolicy
    preprocess: ImagePreprocessor
    # Preprocessed pixels of recent frames (None: every frame is resized again).
    cache: PixelCache | None = None
    preprocess_digest: bytes = field(init=False)
    reads_arrays: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "preprocess_digest", self.preprocess.digest())
        object.__setattr__(self, "reads_arrays", self.preprocess.reads_arrays)

    def process(
        self, items: Sequence[ImageItem], mm_hashes: Sequence[str] | str | None = None
    ) -> list[ProcessedImage]:
        caller_hashes = _caller_hashes(mm_hashes, len(items))
        return [self._process_one(i, item, caller_hashes[i]) for i, item in enumerate(items)]

    def _process_one(self, index: int, item: ImageItem, caller_hash: int | None) -> ProcessedImage:
        encoded = encoded_payload(item, index, self.policy)
        repeated = self._repeated(encoded, caller_hash)
        if repeated is not None:
            return repeated
        # A decoded image stays a PIL image for a PIL resize, which reads it directly; the pixel
        # array (a copy out of PIL's buffer) is made when the server hashes the frame itself or
        # when torch resizes it, once for both.
        if encoded is None:
            frame = load_frame(item, index, self.policy)
        else:
            frame = decode_payload(encoded, index, self.policy)
        pixels = as_pixels(frame) if caller_hash is None or self.reads_arrays else None
        hash128 = self.hash_pixels(pixels) if caller_hash is None else caller_hash
        if encoded is not None and self.cache is not None and caller_hash is None:
            # Only the server's own hash names the bytes: a caller's may name other pixels.
            self.cache.remember(encoded, KnownFrame(hash128, frame_hw(frame)))
        source = pixels if self.reads_arrays else frame
        return ProcessedImage(
            pixel_values=self._pixel_values(source, hash128),
            hash128=hash128,
            source_hw=frame_hw(frame),
            caller_hash=caller_hash is not None,
        )

    def _repeated(self, encoded: bytes | None, caller_hash: int | None) -> ProcessedImage | None:
        """The cached result for bytes the server hashed before, without decoding (with a
        caller's hash only when it is that same hash)."""
        if encoded is None or self.cache is None:
            return None
        known = self.cache.known(encoded)
        if known is None or caller_hash not in (None, known.key):
            return None
        pixels = self.cache.get(known.key)
        if pixels is None:
            return None
        self.cache.count_skipped_decode()
        return ProcessedImage(pixels, known.key, known.source_hw, caller_hash is not None)

    def _pixel_values(self, frame: RgbFrame, hash128: int) -> np.ndarray:
        cached = None if self.cache is None else self.cache.get(hash128)
        if cached is not None:
            return cached
        pixels = self.preprocess.apply(frame)
        if self.cache is not None:
            self.cache.put(hash128, pixels)
        return pixels

    def hash_pixels(self, pixels: np.ndarray) -> int:
        return image_hash(pixels, self.preprocess_digest)


def _caller_hashes(mm_hashes: Sequence[str] | str | None, n_images: int) -> list[int | None]:
    if mm_hashes is None:
        return [None] * n_images
    if isinstance(mm_hashes, str):
        mm_hashes = [mm_hashes]
    if len(mm_hashes) != n_images:
        raise ImageInputError(
            f"has {len(mm_hashes)} entries for {n_images} images (one hash per image)",
            field="mm_hashes",
        )
    parsed: list[int | None] = []
    for index, text in enumerate(mm_hashes):
        try:
            parsed.append(parse_mm_hash(text))
        except ValueError as exc:
            raise ImageInputError(str(exc), index, "mm_hashes") from None
    return parsed
