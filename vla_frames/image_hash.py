"""An image's 128-bit identity, the caller's hex form of it, and the pad ids derived from it.

Image hash (defined here once; the ROS bridge computes the same at the edge)::

    xxh3_128( b"vla-image-v1\\0"                    # 13 bytes: scheme name and version
            + struct.pack("<III", H, W, 3)           # 12 bytes: little-endian uint32 shape
            + preprocess_digest                      # 16 bytes: PreprocessConfig.digest()
            + pixels.tobytes() )                     # H*W*3 bytes, row-major RGB uint8

over the decoded RGB pixels *before* resize/normalise (after grey/alpha/EXIF handling, see
``image_decode``). The result is the 128-bit integer of xxh3's canonical (big-endian) digest;
its text form is 32 lowercase hex digits, which is what ``mm_hashes`` entries carry. A camera
frame in ``bgr8`` must be converted to RGB first. ``preprocess_digest`` scopes the identity to
the checkpoint's preprocessing, so the same pixels under another processor config hash
differently (their embeddings differ too). xxh3 is not cryptographic: the hash is a cache key,
and a client able to send ``mm_hashes`` can claim any identity anyway.
"""

from __future__ import annotations

import hashlib
import string
import struct

import numpy as np
import xxhash

IMAGE_HASH_SCHEME = b"vla-image-v1\0"
MM_HASH_HEX_LEN = 32
_PAD_PERSON = b"vla-mm-pad-v1"  # blake2b personalisation: pad ids are their own domain
_PAD_SENTINELS = 4
_PAD_VALUE_MASK = (1 << 62) - 1
_HEX_DIGITS = frozenset(string.hexdigits)


def image_hash(pixels: np.ndarray, preprocess_digest: bytes) -> int:
    """The 128-bit hash of RGB uint8 ``pixels [H, W, 3]`` under the given preprocessing."""
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"image_hash needs uint8 [H, W, 3], got {pixels.dtype} {pixels.shape}")
    if len(preprocess_digest) != 16:
        raise ValueError("preprocess_digest must be 16 bytes (PreprocessConfig.digest())")
    hasher = xxhash.xxh3_128()
    hasher.update(IMAGE_HASH_SCHEME)
    hasher.update(struct.pack("<III", *pixels.shape))
    hasher.update(preprocess_digest)
    hasher.update(np.ascontiguousarray(pixels).data)
    return hasher.intdigest()


def format_mm_hash(hash128: int) -> str:
    return f"{hash128:032x}"


def parse_mm_hash(text: str) -> int:
    """A caller's ``mm_hashes`` entry (32 hex digits, either case) as an int; ValueError if not."""
    if not isinstance(text, str):
        raise ValueError(f"mm_hash must be a hex string, got {type(text).__name__}")
    if len(text) != MM_HASH_HEX_LEN:
        raise ValueError(
            f"mm_hash must be {MM_HASH_HEX_LEN} hex digits (128 bits), got {len(text)} characters"
        )
    bad = next((c for c in text if c not in _HEX_DIGITS), None)
    if bad is not None:
        raise ValueError(f"mm_hash contains a non-hex character {bad!r}")
    return int(text, 16)


def pad_ids_for_image(hash128: int, n_tokens: int, vocab_size: int) -> list[int]:
    """The ids written into an image's ``n_tokens`` placeholder positions.

    Four sentinels ``s0..s3`` come from ``blake2b(hash128 as 16 big-endian bytes,
    digest_size=32, person=b"vla-mm-pad-v1")`` cut into four 8-byte big-endian words, each
    masked to 62 bits and offset by ``vocab_size``; the positions get ``s0 s1 s2 s3 s0 s1 ...``.
    So every id is in ``[vocab_size, vocab_size + 2**62)``: never a real token, always an int64.
    Identical images give identical runs, and two different images differ already at the first
    position (unless their 62-bit sentinels collide); a prefix match that stops inside a run
    still compares 62 wide bits per position, not a short counter.
    """
    if not 0 <= hash128 < 1 << 128:
        raise ValueError("hash128 must be an unsigned 128-bit integer")
    if not 0 < vocab_size < 1 << 62:
        raise ValueError(f"vocab_size {vocab_size} out of range")
    digest = hashlib.blake2b(
        hash128.to_bytes(16, "big"), digest_size=8 * _PAD_SENTINELS, person=_PAD_PERSON
    ).digest()
    sentinels = [
        vocab_size + (int.from_bytes(digest[8 * i : 8 * i + 8], "big") & _PAD_VALUE_MASK)
        for i in range(_PAD_SENTINELS)
    ]
    return [sentinels[i % _PAD_SENTINELS] for i in range(n_tokens)]
