"""The token id written at a prompt's state position (`PromptPlan.state_position`).

A policy whose robot state is a token of its prompt gets that token's embedding from its action
head, so the id there is a placeholder, like an image's pad ids (`vla_frames.image_hash`): it is
derived from the state's bytes, so the radix prefix cache keys the position by the state. Two
requests with the same observation (images, text, state) share the whole prompt; a different
state differs at that position, so its KV is never reused for another state. The id is
`vocab_size + (blake2b(dtype, shape, bytes) & (2**62 - 1))`: in the image pad ids' range
`[vocab_size, vocab_size + 2**62)`, never a real token, always an int64, in a blake2b domain of
its own.
"""

from __future__ import annotations

import hashlib

import numpy as np

_PERSON = b"vla-state-pad-v1"
_MASK = (1 << 62) - 1


def state_pad_id(state: np.ndarray, vocab_size: int) -> int:
    """The placeholder id of the normalised `state` (its exact bytes, dtype and shape)."""
    if not 0 < vocab_size < 1 << 62:
        raise ValueError(f"vocab_size {vocab_size} out of range")
    a = np.ascontiguousarray(state)
    digest = hashlib.blake2b(digest_size=8, person=_PERSON)
    digest.update(f"{a.dtype.str}{list(a.shape)}".encode())
    digest.update(a.tobytes())
    return vocab_size + (int.from_bytes(digest.digest(), "big") & _MASK)


def with_state_pad_id(
    ids: list[int], position: int | None, state: np.ndarray | None, vocab_size: int
) -> list[int]:
    """`ids` with the state's pad id at `position` (the same list when there is none)."""
    if position is None or state is None:
        return ids
    return [*ids[:position], state_pad_id(state, vocab_size), *ids[position + 1 :]]
