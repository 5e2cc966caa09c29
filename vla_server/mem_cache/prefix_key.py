"""The radix-cache key of a prefix-LM prompt: its bidirectional prefix as one digest.

In a prefix-LM every token of the prefix attends to every other, so the K/V of its first token
(an image patch, say) depend on its last (the instruction's final token, the discretised state).
A cached prefix is therefore only reusable by a request whose prefix is identical token for
token, with the same length and position convention; a partial match is wrong KV. The key's
first entry carries that identity: a 64-bit digest of the prefix ids, its length and its
position shift, placed in `[2**62 + 2**61, 2**63)` so it is never a token id (ids below 2**61)
nor an image pad id (`[vocab_size, vocab_size + 2**62)`, see `multimodal.image_hash`). Every
later entry is the plain token id, so two requests with one prefix share their whole cached
path, prefix and generated tokens alike.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

_BASE = (1 << 62) + (1 << 61)
_MASK = (1 << 61) - 1


def prefix_lm_key_head(prefix: Sequence[int], position_shift: int) -> int:
    digest = hashlib.blake2b(digest_size=8, person=b"vla-prefix-lm-1")
    digest.update(struct.pack("<qq", len(prefix), position_shift))
    digest.update(b"".join(int(t).to_bytes(8, "little", signed=True) for t in prefix))
    return _BASE + (int.from_bytes(digest.digest(), "little") & _MASK)
