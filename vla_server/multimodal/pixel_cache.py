"""Preprocessed pixels of recent frames, by image hash: a repeated frame skips its resize.

A robot sends the same camera frame again (a new instruction, a retry, a second action request
before the camera updates); its hash is known right after decoding, and the hash already covers
the preprocessing settings (their digest), so the stored `pixel_values` are exactly what the
resize and normalisation would give again. Least recently used entries go first once the byte
budget is full. The image pipeline runs in a thread pool, so access is locked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np


class PixelCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: int) -> np.ndarray | None:
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: int, value: np.ndarray) -> None:
        """Store `value` (made read-only: every request that hits shares it)."""
        if value.nbytes > self.max_bytes:
            return
        value.flags.writeable = False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = value
            self._bytes += value.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "hits": self.hits,
                "misses": self.misses,
            }
