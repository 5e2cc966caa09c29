"""Expanding image placeholders in a prompt into the model's image-token positions.

Each `<image>` placeholder becomes `tokens_per_image` positions whose ids are the image's
hash-derived pad ids (all >= the model vocabulary, never a real token), so identical images give
identical token sequences and the radix prefix cache can match across them. The decoder replaces
the embeddings at those positions with the image's projected vision features.
"""

from __future__ import annotations

from dataclasses import dataclass

from vla_frames.image_hash import pad_ids_for_image


@dataclass(frozen=True)
class ImageSpan:
    offset: int
    length: int
    hash128: int


class PlaceholderError(ValueError):
    pass


def expand_image_placeholders(
    ids: list[int],
    image_token_id: int | None,
    hashes: list[int],
    tokens_per_image: int,
    vocab_size: int,
    insert_at: int = 0,
) -> tuple[list[int], list[ImageSpan]]:
    """The expanded ids and where each image sits. A prompt without placeholders (or a model
    without a placeholder token: `image_token_id` None) gets its images at `insert_at` (LLaVA's
    and fused-tower VLAs' convention: right after BOS); otherwise the number of placeholders must
    equal the number of images."""
    positions = [i for i, t in enumerate(ids) if t == image_token_id]
    if not positions and hashes:
        ids = ids[:insert_at] + [-1] * len(hashes) + ids[insert_at:]  # -1: replaced below
        positions = list(range(insert_at, insert_at + len(hashes)))
    if len(positions) != len(hashes):
        raise PlaceholderError(
            f"the prompt has {len(positions)} image placeholders for {len(hashes)} images"
        )
    out: list[int] = []
    spans: list[ImageSpan] = []
    prev = 0
    for pos, h in zip(positions, hashes, strict=True):
        out += ids[prev:pos]
        spans.append(ImageSpan(len(out), tokens_per_image, h))
        out += pad_ids_for_image(h, tokens_per_image, vocab_size)
        prev = pos + 1
    out += ids[prev:]
    return out, spans
