"""A request's image state across prefill chunks: which images a chunk resolves first, and which
features stay for later chunks (an image may appear twice in one prompt)."""

from __future__ import annotations

import numpy as np
import torch

from vla_server.io_struct import MMItem, Tensor, TokenizedGenerateReqInput
from vla_server.multimodal.prefill_images import PrefillImages

PIXELS = Tensor.from_numpy(np.zeros((3, 2, 2), np.float32))


def item(key: str, offset: int, length: int = 10) -> MMItem:
    return MMItem(key * 32, offset, length, PIXELS)


def resolve(state: PrefillImages, items: list[MMItem], hi: int) -> list[int]:
    """What the embedder does with the unresolved images of a chunk ending at `hi`."""
    new = state.unresolved(items, hi)
    for i in new:
        state.resolved.add(i)
        state.features[items[i].hash] = torch.full((items[i].length, 1), float(i))
    return new


def test_each_image_is_resolved_by_the_first_chunk_that_reaches_it():
    items = [item("a", 2), item("b", 14), item("c", 30)]
    state = PrefillImages()
    assert resolve(state, items, hi=8) == [0]  # a starts inside [0, 8)
    state.drop_passed(items, 8)
    assert resolve(state, items, hi=16) == [1]  # a again, b starts: only b is new
    state.drop_passed(items, 16)
    assert list(state.features) == ["b" * 32]  # a ended at 12; b runs to 24
    assert resolve(state, items, hi=64) == [2]
    state.drop_passed(items, 64)
    assert state.features == {} and resolve(state, items, hi=64) == []


def test_features_of_an_image_that_appears_twice_stay_until_its_last_position():
    items = [item("a", 0), item("a", 12)]  # the same frame from two cameras
    state = PrefillImages()
    assert resolve(state, items, hi=16) == [0, 1]
    state.drop_passed(items, 16)  # the first copy is done, the second runs to 22
    assert list(state.features) == ["a" * 32]
    state.drop_passed(items, 22)
    assert state.features == {}


def test_reset_forgets_resolved_images_and_frees_features():
    items = [item("a", 0, 40)]
    state = PrefillImages()
    resolve(state, items, hi=8)
    state.drop_passed(items, 8)
    assert state.features  # still needed by positions 8..40
    state.reset()
    assert state.features == {} and resolve(state, items, hi=8) == [0]


def test_releasing_a_requests_kv_releases_its_image_state():
    """Finish, abort and retraction all go through KVCacheManager.release."""
    from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
    from vla_server.model.sampling import SamplingParams
    from vla_server.scheduler.kv_cache_manager import KVCacheManager
    from vla_server.scheduler.req import Req

    kv = KVCacheManager(
        ReqToTokenPool(2, 64), TokenToKVPool(64, 1, 1, 4, torch.float32), disable_radix=False
    )
    wire = TokenizedGenerateReqInput(
        rid="r",
        input_ids=list(range(30)),
        sampling_params=SamplingParams(),
        mm_items=[item("a", 2, 20)],
    )
    req = Req.from_wire(wire)
    prefix, node = kv.match(req)
    kv.admit(req, prefix, node)
    slots = kv.alloc(8)
    assert slots is not None
    kv.req_to_token[req.req_pool_idx, :8] = slots.to(kv.req_to_token.dtype)
    req.kv_len = 8  # one chunk of [0, 8) ran: image a (2..22) is half done
    resolve(req.prefill_images, req.mm_items, hi=8)
    req.prefill_images.drop_passed(req.mm_items, 8)
    assert req.prefill_images.features
    kv.release(req)
    assert req.prefill_images == PrefillImages()
