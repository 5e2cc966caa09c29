"""Radix prefix cache: a token-level tree from cached token-id prefixes to their KV slots.

Keys are plain int sequences (image pad ids above the vocabulary are ordinary ints, so identical
images share nodes). Each non-root node stores an edge ``key`` and a same-length int64 ``value`` of
KV slot indices.

Slot ownership, the contract callers rely on. Every KV slot belongs to exactly one of: the
allocator's free list, the tree (some node's ``value``), or one request (slots it allocated and has
not handed over yet).

* ``match_prefix`` returns the tree's own slots; they stay tree-owned. A request that reads them
  must hold ``inc_lock_ref(last_node)`` until it releases them, or eviction may free them.
* ``insert(key, indices)`` returns ``n``, how many leading tokens were already cached. The tree
  takes ``indices[n:]``. ``indices[:n]`` stay with the caller, which must free those it allocated
  itself (never those it got from ``match_prefix``).
* For a request, ``prefix_len(locked_node)`` is how many leading entries of its indices are the
  tree's; it owns the rest. ``cache_finished`` leaves it owning nothing of ``indices``.
* ``evict`` and ``reset`` return tree slots to the allocator.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from vla_server.mem_cache.kv_pool import TokenSlotAllocator


@dataclass(eq=False, slots=True)
class TreeNode:
    key: list[int]
    value: torch.Tensor
    parent: TreeNode | None
    node_id: int
    children: dict[int, TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    pin_ref: int = 0
    last_access: int = 0


@dataclass(frozen=True, slots=True)
class MatchResult:
    indices: torch.Tensor
    last_node: TreeNode


@dataclass(eq=False, slots=True)
class PinHandle:
    """A lock held on behalf of an owner that outlives requests (an open robot session)."""

    node: TreeNode
    num_tokens: int
    owner: object = None
    released: bool = False


@dataclass(slots=True)
class CacheStats:
    """Prefix-hit counters; the scheduler records one entry per admitted request."""

    hit_tokens: int = 0
    queried_tokens: int = 0

    def record(self, hit_tokens: int, queried_tokens: int) -> None:
        self.hit_tokens += hit_tokens
        self.queried_tokens += queried_tokens

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class RadixCache:
    def __init__(self, allocator: TokenSlotAllocator, disable: bool = False):
        self.allocator = allocator
        self.disable = disable
        self.stats = CacheStats()
        self._empty = torch.empty(0, dtype=torch.int64, device=allocator.device)
        self._ids = itertools.count()
        # A logical clock: LRU needs only an order, and it keeps eviction deterministic.
        self._clock = itertools.count(1)
        self._num_request_locks = 0
        self._init_tree()

    def _init_tree(self) -> None:
        self.root = TreeNode(key=[], value=self._empty, parent=None, node_id=next(self._ids))
        self._evictable = 0
        self._protected = 0
        self._pinned = 0
        self._pins: dict[PinHandle, None] = {}  # insertion-ordered: oldest pin first

    # ---- sizes -----------------------------------------------------------------------------

    def total_size(self) -> int:
        return self._evictable + self._protected

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def pinned_size(self) -> int:
        """Distinct tokens held by pins (a prefix shared by two sessions counts once)."""
        return self._pinned

    def prefix_len(self, node: TreeNode) -> int:
        """Number of tokens on the path from the root to the end of ``node``."""
        n = 0
        while node is not self.root:
            n += len(node.key)
            node = node.parent
        return n

    # ---- match / insert --------------------------------------------------------------------

    def match_prefix(self, key: Sequence[int]) -> MatchResult:
        """Longest cached prefix of ``key``; the returned slots stay owned by the tree."""
        if self.disable:
            return MatchResult(self._empty, self.root)
        node, values = self._walk(_as_list(key), next(self._clock))
        return MatchResult(torch.cat(values) if values else self._empty, node)

    def insert(self, key: Sequence[int], indices: torch.Tensor) -> int:
        """Cache ``key`` -> ``indices``; returns the number of leading tokens already cached.

        The tree takes ``indices[n:]`` (when disabled it takes and frees them all, returning 0).
        """
        key = _as_list(key)
        if len(key) != len(indices):
            raise ValueError(f"key has {len(key)} tokens but {len(indices)} indices")
        if self.disable:
            self.allocator.free(indices)
            return 0
        now = next(self._clock)
        node, values = self._walk(key, now)
        num_cached = sum(len(v) for v in values)
        if num_cached < len(key):
            self._add_leaf(node, key[num_cached:], indices[num_cached:], now)
        return num_cached

    def _walk(self, key: list[int], now: int) -> tuple[TreeNode, list[torch.Tensor]]:
        """Follow ``key`` from the root, splitting an edge where the match ends inside it and
        setting the access time of every node on the matched path to ``now``."""
        node, pos, values = self.root, 0, []
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                break
            n = _common_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            values.append(child.value)
            node, pos = child, pos + n
        return node, values

    def _split(self, node: TreeNode, n: int) -> TreeNode:
        # The original object keeps the tail so that a request holding it still ends at the same
        # position; the new head inherits its locks because every lock on the tail passes it.
        head = TreeNode(
            key=node.key[:n],
            value=node.value[:n],
            parent=node.parent,
            node_id=next(self._ids),
            lock_ref=node.lock_ref,
            pin_ref=node.pin_ref,
            last_access=node.last_access,
        )
        node.parent.children[head.key[0]] = head
        node.key, node.value, node.parent = node.key[n:], node.value[n:], head
        head.children[node.key[0]] = node
        return head

    def _add_leaf(self, parent: TreeNode, key: list[int], indices: torch.Tensor, now: int) -> None:
        # Copy: the caller's tensor is often a view of its req_to_token row, which gets reused.
        value = indices.to(dtype=torch.int64, copy=True)
        leaf = TreeNode(
            key=key, value=value, parent=parent, node_id=next(self._ids), last_access=now
        )
        parent.children[key[0]] = leaf
        self._evictable += len(key)

    # ---- locks and pins --------------------------------------------------------------------

    def inc_lock_ref(self, node: TreeNode) -> None:
        self._num_request_locks += 1
        self._add_lock(node, 1)

    def dec_lock_ref(self, node: TreeNode) -> None:
        self._num_request_locks -= 1
        self._add_lock(node, -1)

    def _add_lock(self, node: TreeNode, delta: int) -> None:
        while node is not self.root:
            before = node.lock_ref
            node.lock_ref += delta
            if node.lock_ref < 0:
                raise RuntimeError("dec_lock_ref on a node that is not locked")
            if (before == 0) != (node.lock_ref == 0):
                moved = len(node.key) if before == 0 else -len(node.key)
                self._evictable -= moved
                self._protected += moved
            node = node.parent

    def pin(self, node: TreeNode, owner: object = None) -> PinHandle:
        """Lock ``node``'s path until ``unpin``; callers bound pins with ``release_pins_over``."""
        handle = PinHandle(node=node, num_tokens=self.prefix_len(node), owner=owner)
        self._add_lock(node, 1)
        self._add_pin(node, 1)
        self._pins[handle] = None
        return handle

    def unpin(self, handle: PinHandle) -> None:
        """Release a pin; a handle already released (by the budget or a reset) is ignored."""
        if handle.released:
            return
        handle.released = True
        del self._pins[handle]
        self._add_pin(handle.node, -1)
        self._add_lock(handle.node, -1)

    def _add_pin(self, node: TreeNode, delta: int) -> None:
        while node is not self.root:
            before = node.pin_ref
            node.pin_ref += delta
            if (before == 0) != (node.pin_ref == 0):
                self._pinned += delta * len(node.key)
            node = node.parent

    def pins(self) -> list[PinHandle]:
        """Live pins, oldest first."""
        return list(self._pins)

    def release_pins_over(self, max_tokens: int) -> list[PinHandle]:
        """Unpin the oldest pins until at most ``max_tokens`` distinct tokens stay pinned."""
        released = []
        while self._pinned > max_tokens:
            handle = next(iter(self._pins))
            self.unpin(handle)
            released.append(handle)
        return released

    # ---- eviction and flush ----------------------------------------------------------------

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` tree slots (fewer if not enough are evictable), least
        recently used unlocked leaves first; returns how many were freed."""
        heap = [(n.last_access, n.node_id, n) for n in self._nodes() if self._evictable_leaf(n)]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            self.allocator.free(leaf.value)
            freed += len(leaf.key)
            self._evictable -= len(leaf.key)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            if parent is not self.root and self._evictable_leaf(parent):
                heapq.heappush(heap, (parent.last_access, parent.node_id, parent))
        return freed

    def _evictable_leaf(self, node: TreeNode) -> bool:
        return not node.children and node.lock_ref == 0

    def _nodes(self) -> Iterator[TreeNode]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            yield node

    def reset(self) -> None:
        """Drop every cached entry and pin, returning all tree slots to the allocator.

        Refused while a request holds a lock: its slots would be freed under it. Whether a flush
        is allowed at all (e.g. with requests queued) is the caller's decision.
        """
        if self._num_request_locks:
            raise RuntimeError(f"{self._num_request_locks} request locks outstanding")
        for node in self._nodes():
            self.allocator.free(node.value)
        for handle in self._pins:
            handle.released = True
        self._init_tree()

    # ---- request lifecycle -----------------------------------------------------------------

    def cache_finished(
        self, key: Sequence[int], indices: torch.Tensor, last_locked_node: TreeNode
    ) -> None:
        """Hand a finished request's KV to the tree and drop its lock.

        ``indices[i]`` is the slot of ``key[i]``; the first ``prefix_len(last_locked_node)`` came
        from ``match_prefix``. Afterwards the request owns none of ``indices``.
        """
        self._insert_request(key, indices, last_locked_node)
        self.dec_lock_ref(last_locked_node)

    def _insert_request(
        self, key: Sequence[int], indices: torch.Tensor, last_locked_node: TreeNode
    ) -> None:
        num_cached = self.insert(key, indices)
        # Slots between the request's locked prefix and num_cached were allocated by the request
        # for a span another request cached meanwhile; the tree kept its own copy.
        locked_len = self.prefix_len(last_locked_node)
        if num_cached > locked_len:
            self.allocator.free(indices[locked_len:num_cached])


def _as_list(key: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(key, list):
        return key
    return key.tolist() if isinstance(key, torch.Tensor) else list(key)


def _common_len(edge: list[int], key: list[int], start: int) -> int:
    n = len(edge)
    if key[start : start + n] == edge:  # one C-level comparison for the common full-edge case
        return n
    # Bisect on slice equality: O(log n) Python steps instead of a per-token loop.
    lo, hi = 0, min(n, len(key) - start)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if edge[lo:mid] == key[start + lo : start + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
