"""Radix cache against a reference model: a dict from every cached token prefix to its slot.

The model knows nothing about nodes or edges. It states what the cache must hold (prefix-closed
content, the slot of each cached token), which prefixes are locked (a prefix of some request's or
pin's locked prefix) and when each prefix was last touched (one tick per match/insert). Eviction
works on whole nodes, so the model does not predict which tokens go; it checks that what went was
unlocked, was least recently used, and was enough.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vla_server.mem_cache.kv_pool import TokenSlotAllocator
from vla_server.mem_cache.radix_cache import PinHandle, RadixCache, TreeNode

POOL_SIZE = 48
IMAGE_PAD = 1_000_003  # an image pad id far above any vocabulary
TOKENS = st.sampled_from([0, 1, 2, IMAGE_PAD])
KEYS = st.lists(TOKENS, min_size=0, max_size=12).map(tuple)

Prefix = tuple[int, ...]


def slots(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def tree_contents(cache: RadixCache) -> dict[Prefix, int]:
    """Every cached token prefix -> its slot, read off the tree structure."""
    out: dict[Prefix, int] = {}
    stack: list[tuple[TreeNode, Prefix]] = [(cache.root, ())]
    while stack:
        node, prefix = stack.pop()
        for tok, slot in zip(node.key, node.value.tolist(), strict=True):
            prefix = (*prefix, tok)
            out[prefix] = slot
        stack.extend((child, prefix) for child in node.children.values())
    return out


def drain_free(alloc: TokenSlotAllocator) -> list[int]:
    """The allocator's free slots, read through its public API and handed back."""
    free = alloc.alloc(alloc.available_size())
    alloc.free(free)
    return free.tolist()


def closure(prefixes: list[Prefix]) -> set[Prefix]:
    return {p[:i] for p in prefixes for i in range(1, len(p) + 1)}


@dataclass
class SimReq:
    key: Prefix
    row: list[int]  # slot per token; row[:locked_len] are the tree's, the rest the request's
    locked_len: int
    node: TreeNode


class RefModel:
    def __init__(self) -> None:
        self.slot: dict[Prefix, int] = {}
        self.touched: dict[Prefix, int] = {}
        self.clock = 0

    def match(self, key: Prefix) -> list[int]:
        n = 0
        while n < len(key) and key[: n + 1] in self.slot:
            n += 1
        return [self.slot[key[: i + 1]] for i in range(n)]

    def touch(self, key: Prefix, n: int) -> None:
        self.clock += 1
        for i in range(1, n + 1):
            self.touched[key[:i]] = self.clock

    def insert(self, key: Prefix, row: list[int]) -> int:
        num_cached = len(self.match(key))
        for i in range(num_cached, len(key)):
            self.slot[key[: i + 1]] = row[i]
        self.touch(key, len(key))
        return num_cached


class RadixCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.alloc = TokenSlotAllocator(POOL_SIZE)
        self.cache = RadixCache(self.alloc)
        self.model = RefModel()
        self.reqs: list[SimReq] = []
        self.pins: list[tuple[PinHandle, Prefix]] = []

    # ---- helpers ---------------------------------------------------------------------------

    def locked_prefixes(self) -> set[Prefix]:
        return closure([r.key[: r.locked_len] for r in self.reqs] + [p for _, p in self.pins])

    def checked_match(self, key: Prefix):
        result = self.cache.match_prefix(key)
        expected = self.model.match(key)
        assert result.indices.tolist() == expected
        assert self.cache.prefix_len(result.last_node) == len(expected)
        self.model.touch(key, len(expected))
        return result

    def checked_evict(self, num_tokens: int) -> int:
        before = dict(self.model.slot)
        evictable_before = self.cache.evictable_size()
        freed = self.cache.evict(num_tokens)
        after = tree_contents(self.cache)
        assert all(before.get(p) == s for p, s in after.items())
        evicted = set(before) - set(after)
        assert freed == len(evicted)
        assert freed >= min(num_tokens, evictable_before)
        locked = self.locked_prefixes()
        assert not evicted & locked, "a locked or pinned prefix was evicted"
        parents = {p[:-1] for p in after}
        leaves = [p for p in after if p not in parents and p not in locked]
        if evicted and leaves:
            newest_evicted = max(self.model.touched[p] for p in evicted)
            assert newest_evicted <= min(self.model.touched[p] for p in leaves), "not LRU"
        self.model.slot = after
        return freed

    def alloc_with_evict(self, n: int) -> torch.Tensor | None:
        if n > self.alloc.available_size():
            self.checked_evict(n - self.alloc.available_size())
        return self.alloc.alloc(n)

    def release(self, req: SimReq) -> None:
        self.reqs.remove(req)
        self.alloc.free(slots(req.row[req.locked_len :]))
        self.cache.dec_lock_ref(req.node)

    # ---- rules -----------------------------------------------------------------------------

    @rule(key=KEYS)
    def admit(self, key: Prefix) -> None:
        match = self.checked_match(key)
        self.cache.inc_lock_ref(match.last_node)
        prefix = match.indices.tolist()
        req = SimReq(key, prefix, len(prefix), match.last_node)
        self.reqs.append(req)
        new = self.alloc_with_evict(len(key) - len(prefix))
        if new is None:
            self.release(req)
        else:
            req.row += new.tolist()

    @precondition(lambda self: self.reqs)
    @rule(i=st.integers(0, 99))
    def finish(self, i: int) -> None:
        req = self.reqs.pop(i % len(self.reqs))
        self.cache.cache_finished(req.key, slots(req.row), req.node)
        self.model.insert(req.key, req.row)

    @precondition(lambda self: self.reqs)
    @rule(i=st.integers(0, 99))
    def abort(self, i: int) -> None:
        self.release(self.reqs[i % len(self.reqs)])

    @rule(key=KEYS)
    def insert(self, key: Prefix) -> None:
        new = self.alloc_with_evict(len(key))
        if new is None:
            return
        num_cached = self.cache.insert(key, new)
        assert num_cached == self.model.insert(key, new.tolist())
        self.alloc.free(new[:num_cached])

    @rule(key=KEYS)
    def match(self, key: Prefix) -> None:
        self.checked_match(key)

    @rule(n=st.integers(0, POOL_SIZE))
    def evict(self, n: int) -> None:
        self.checked_evict(n)

    @rule(key=KEYS)
    def pin(self, key: Prefix) -> None:
        match = self.checked_match(key)
        handle = self.cache.pin(match.last_node)
        assert handle.num_tokens == len(match.indices)
        self.pins.append((handle, key[: handle.num_tokens]))

    @precondition(lambda self: self.pins)
    @rule(i=st.integers(0, 99))
    def unpin(self, i: int) -> None:
        handle, _ = self.pins.pop(i % len(self.pins))
        self.cache.unpin(handle)

    @rule(budget=st.integers(0, 16))
    def enforce_pin_budget(self, budget: int) -> None:
        expected = []
        while len(closure([p for _, p in self.pins])) > budget:
            expected.append(self.pins.pop(0)[0])
        released = self.cache.release_pins_over(budget)
        assert [id(h) for h in released] == [id(h) for h in expected]
        assert all(h.released for h in released)

    @rule()
    def flush(self) -> None:
        if self.reqs:
            with pytest.raises(RuntimeError):
                self.cache.reset()
            return
        self.cache.reset()
        assert all(h.released for h, _ in self.pins)
        self.pins.clear()
        self.model.slot.clear()

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def content_matches_model(self) -> None:
        assert tree_contents(self.cache) == self.model.slot

    @invariant()
    def sizes_match_model(self) -> None:
        locked = self.locked_prefixes()
        assert self.cache.total_size() == len(self.model.slot)
        assert self.cache.protected_size() == len(locked)
        assert self.cache.evictable_size() == len(self.model.slot) - len(locked)
        assert self.cache.pinned_size() == len(closure([p for _, p in self.pins]))

    @invariant()
    def every_slot_owned_once(self) -> None:
        tree = list(self.model.slot.values())
        held = [s for r in self.reqs for s in r.row[r.locked_len :]]
        free = drain_free(self.alloc)
        owners = tree + held + free
        assert len(owners) == len(set(owners)), "a KV slot is owned twice"
        assert set(owners) == set(range(1, POOL_SIZE + 1)), "a KV slot leaked"
        used = self.cache.protected_size() + len(held)
        assert used + len(free) + self.cache.evictable_size() == POOL_SIZE

    @invariant()
    def requests_still_see_their_prefix(self) -> None:
        for r in self.reqs:
            assert r.row[: r.locked_len] == self.model.match(r.key)[: r.locked_len]

    @invariant()
    def lock_refs_count_holders(self) -> None:
        holders = [r.key[: r.locked_len] for r in self.reqs] + [p for _, p in self.pins]
        stack: list[tuple[TreeNode, Prefix]] = [(c, ()) for c in self.cache.root.children.values()]
        while stack:
            node, above = stack.pop()
            path = (*above, *node.key)
            assert node.key and len(node.key) == len(node.value)
            assert node.lock_ref == sum(h[: len(path)] == path for h in holders)
            stack.extend((c, path) for c in node.children.values())
            assert all(c.parent is node and c.key[0] == t for t, c in node.children.items())


TestRadixCacheStateful = RadixCacheMachine.TestCase
TestRadixCacheStateful.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# ---- example-based checks of single behaviours --------------------------------------------


def test_match_mid_edge_splits_and_returns_inserted_slots() -> None:
    alloc = TokenSlotAllocator(16)
    cache = RadixCache(alloc)
    assert cache.insert([5, 6, 7, 8], slots([11, 12, 13, 14])) == 0
    result = cache.match_prefix([5, 6, 9])
    assert result.indices.tolist() == [11, 12]
    assert result.last_node.key == [5, 6]
    assert [c.key for c in result.last_node.children.values()] == [[7, 8]]
    assert cache.insert([5, 6, 7, 8, 1], slots([1, 2, 3, 4, 15])) == 4


def test_tree_keeps_its_own_copy_of_inserted_indices() -> None:
    cache = RadixCache(TokenSlotAllocator(16))
    row = torch.tensor([3, 4, 5, 6], dtype=torch.int64)  # stands in for a req_to_token row
    cache.insert([1, 2, 3], row[:3])
    row[:] = 0  # the row is reused by the next request
    assert cache.match_prefix([1, 2, 3]).indices.tolist() == [3, 4, 5]


def test_evict_takes_least_recently_used_leaf_first() -> None:
    alloc = TokenSlotAllocator(16)
    cache = RadixCache(alloc)
    cache.insert([1, 2], alloc.alloc(2))
    cache.insert([3, 4], alloc.alloc(2))
    cache.match_prefix([1, 2])  # [3, 4] is now the least recently used
    assert cache.evict(1) == 2
    assert cache.match_prefix([3, 4]).indices.numel() == 0
    assert cache.match_prefix([1, 2]).indices.tolist() == [1, 2]
    assert alloc.available_size() == 14


def test_evict_skips_locked_leaf_and_frees_parent_after_children() -> None:
    alloc = TokenSlotAllocator(16)
    cache = RadixCache(alloc)
    cache.insert([1, 2, 7], alloc.alloc(3))
    cache.insert([1, 2, 8], torch.cat([cache.match_prefix([1, 2]).indices, alloc.alloc(1)]))
    cache.inc_lock_ref(cache.match_prefix([1, 2, 8]).last_node)
    assert cache.evict(100) == 1  # only [7]; [1, 2] stays because [8] under it is locked
    assert cache.protected_size() == 3 and cache.evictable_size() == 0
    assert alloc.available_size() == 13


def test_two_requests_computing_the_same_prompt_free_the_duplicate() -> None:
    alloc = TokenSlotAllocator(8)
    cache = RadixCache(alloc)
    key = [4, 4, 4]
    first, second = cache.match_prefix(key), cache.match_prefix(key)
    cache.inc_lock_ref(first.last_node)
    cache.inc_lock_ref(second.last_node)
    a, b = alloc.alloc(3), alloc.alloc(3)
    cache.cache_finished(key, a, first.last_node)
    cache.cache_finished(key, b, second.last_node)
    assert cache.match_prefix(key).indices.tolist() == a.tolist()
    assert alloc.available_size() == 8 - 3
    assert cache.evictable_size() == 3 and cache.protected_size() == 0


def test_identical_images_share_pad_ids_and_different_images_diverge() -> None:
    alloc = TokenSlotAllocator(16)
    cache = RadixCache(alloc)
    image_a, image_b = 2_000_001, 2_000_777
    cache.insert([1, image_a, image_a, 5], slots([1, 2, 3, 4]))
    assert cache.match_prefix([1, image_a, image_a, 6]).indices.tolist() == [1, 2, 3]
    assert cache.match_prefix([1, image_b, image_b, 5]).indices.tolist() == [1]


def test_pin_keeps_session_context_and_budget_unpins_oldest() -> None:
    alloc = TokenSlotAllocator(16)
    cache = RadixCache(alloc)
    cache.insert([1, 2, 3], alloc.alloc(3))
    cache.insert([1, 2, 4], torch.cat([cache.match_prefix([1, 2]).indices, alloc.alloc(1)]))
    old = cache.pin(cache.match_prefix([1, 2, 3]).last_node, owner="arm")
    new = cache.pin(cache.match_prefix([1, 2, 4]).last_node, owner="cart")
    assert cache.pinned_size() == 4  # the shared [1, 2] counts once
    assert cache.evict(100) == 0
    assert cache.release_pins_over(3) == [old]
    assert cache.pins() == [new] and cache.pinned_size() == 3
    cache.unpin(old)  # already released by the budget: ignored
    assert cache.evict(100) == 1
    cache.unpin(new)
    assert cache.evict(100) == 3 and alloc.available_size() == 16


def test_reset_refused_while_a_request_holds_a_lock() -> None:
    alloc = TokenSlotAllocator(8)
    cache = RadixCache(alloc)
    cache.insert([1, 2], alloc.alloc(2))
    node = cache.match_prefix([1, 2]).last_node
    cache.inc_lock_ref(node)
    with pytest.raises(RuntimeError):
        cache.reset()
    cache.dec_lock_ref(node)
    pin = cache.pin(node)
    cache.reset()
    assert pin.released and cache.total_size() == 0 and alloc.available_size() == 8


def test_disabled_cache_holds_nothing_and_frees_finished_requests() -> None:
    alloc = TokenSlotAllocator(8)
    cache = RadixCache(alloc, disable=True)
    assert cache.insert([1, 2], alloc.alloc(2)) == 0
    match = cache.match_prefix([1, 2])
    assert match.indices.numel() == 0 and cache.prefix_len(match.last_node) == 0
    cache.inc_lock_ref(match.last_node)
    mine = alloc.alloc(3)
    cache.cache_finished([1, 2, 3], mine, match.last_node)
    assert alloc.available_size() == 8 and cache.total_size() == 0


def test_hit_rate_counts_recorded_admissions() -> None:
    cache = RadixCache(TokenSlotAllocator(4))
    assert cache.stats.hit_rate == 0.0
    cache.stats.record(hit_tokens=3, queried_tokens=4)
    cache.stats.record(hit_tokens=0, queried_tokens=4)
    assert (cache.stats.hit_tokens, cache.stats.queried_tokens) == (3, 8)
    assert cache.stats.hit_rate == 3 / 8
