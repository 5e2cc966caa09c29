"""One request's images during its prefill: which are resolved, and the features still needed.

A chunked prefill can split an image's positions over several forwards. The image is resolved
(prefix cache, embedding cache or vision tower, counted once) in the first chunk that reaches it,
and its features stay here until the last chunk covering it has run, so later chunks neither
look it up again nor, with an embedding cache too small to hold it, re-run the vision tower.

Written only by the model worker while a batch of the request is in flight; reset by the
scheduler when the request's KV is released (finish, abort, retraction), when none is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vla_server.io_struct import MMItem


@dataclass
class PrefillImages:
    resolved: set[int] = field(default_factory=set)  # indices into the request's mm_items
    features: dict[str, torch.Tensor] = field(default_factory=dict)  # by image hash

    def unresolved(self, items: list[MMItem], hi: int) -> list[int]:
        """Indices of the images that start before position `hi` and are not resolved yet."""
        if len(self.resolved) == len(items):
            return []  # the common case once the prefill has passed every image
        return [i for i, it in enumerate(items) if i not in self.resolved and it.offset < hi]

    def drop_passed(self, items: list[MMItem], hi: int) -> None:
        """Free the features no position from `hi` on needs (an image may appear twice)."""
        needed = {it.hash for i, it in enumerate(items) if i in self.resolved and _end(it) > hi}
        for key in [k for k in self.features if k not in needed]:
            del self.features[key]

    def reset(self) -> None:
        """Forget everything: a later prefill (after a retraction) resolves its images again."""
        self.resolved.clear()
        self.features.clear()


def _end(item: MMItem) -> int:
    return item.offset + item.length
