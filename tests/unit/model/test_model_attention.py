"""TorchAttentionBackend against naive per-request attention, KV slots scattered in the pool."""

from __future__ import annotations

import math

import pytest
import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.attention.torch_backend import TorchAttentionBackend
from vla_server.model.forward_batch import ForwardBatch, ForwardMode

HEADS, KV_HEADS, HEAD_DIM, POOL = 6, 2, 16, 400


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix: int) -> torch.Tensor:
    """q [n, H, D] for positions prefix..prefix+n-1; k, v [prefix+n, KV, D]; loops, float64."""
    group = HEADS // KV_HEADS
    out = torch.zeros(q.shape, dtype=torch.float64)
    for i in range(q.shape[0]):
        visible = prefix + i + 1
        for h in range(HEADS):
            scores = [
                float(q[i, h].double() @ k[j, h // group].double()) / math.sqrt(HEAD_DIM)
                for j in range(visible)
            ]
            weights = torch.softmax(torch.tensor(scores, dtype=torch.float64), dim=0)
            out[i, h] = weights @ v[:visible, h // group].double()
    return out


def make_batch(prefix_lens: list[int], extend_lens: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    req_pool = ReqToTokenPool(8, 64)
    kv_pool = TokenToKVPool(POOL, 1, KV_HEADS, HEAD_DIM, torch.float32)
    seq_lens = [p + n for p, n in zip(prefix_lens, extend_lens, strict=True)]
    slots = (torch.randperm(POOL, generator=g) + 1)[: sum(seq_lens)]  # scattered slots
    rows = [5, 0, 3, 7, 1][: len(seq_lens)]
    full_k = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=g) for n in seq_lens]
    full_v = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=g) for n in seq_lens]
    out_loc, offset = [], 0
    for i, n in enumerate(seq_lens):
        req_slots = slots[offset : offset + n]
        offset += n
        prefix = req_slots[: prefix_lens[i]]
        # Only the cached prefix is in the table: new tokens' slots come from out_cache_loc.
        req_pool.req_to_token[rows[i], : len(prefix)] = prefix.to(torch.int32)
        kv_pool.set_kv(0, prefix, full_k[i][: prefix_lens[i]], full_v[i][: prefix_lens[i]])
        out_loc.append(req_slots[prefix_lens[i] :])
    q = torch.randn(sum(extend_lens), HEADS, HEAD_DIM, generator=g)
    k = torch.cat([fk[p:] for fk, p in zip(full_k, prefix_lens, strict=True)])
    v = torch.cat([fv[p:] for fv, p in zip(full_v, prefix_lens, strict=True)])
    starts = [sum(extend_lens[:i]) for i in range(len(extend_lens))]
    batch = ForwardBatch(
        mode=ForwardMode.DECODE if max(extend_lens) == 1 else ForwardMode.EXTEND,
        batch_size=len(seq_lens),
        input_ids=torch.zeros(len(q), dtype=torch.int64),
        positions=torch.cat(
            [torch.arange(p, s) for p, s in zip(prefix_lens, seq_lens, strict=True)]
        ),
        req_pool_indices=torch.tensor(rows),
        seq_lens=torch.tensor(seq_lens),
        prefix_lens=torch.tensor(prefix_lens),
        extend_lens=torch.tensor(extend_lens),
        extend_start_loc=torch.tensor(starts),
        out_cache_loc=torch.cat(out_loc),
        seq_lens_cpu=seq_lens,
        prefix_lens_cpu=prefix_lens,
        extend_lens_cpu=extend_lens,
    )
    return TorchAttentionBackend(req_pool, kv_pool), batch, (q, k, v), (full_k, full_v)


@pytest.mark.parametrize(
    ("prefix_lens", "extend_lens"),
    [
        ([9, 0, 30, 4], [1, 1, 1, 1]),  # DECODE, one request with nothing cached
        ([0, 12, 0, 5, 20], [7, 5, 1, 1, 9]),  # EXTEND: fresh, on a prefix, decoding requests
    ],
    ids=["decode", "mixed-extend"],
)
def test_matches_naive_attention(prefix_lens, extend_lens):
    backend, batch, (q, k, v), (full_k, full_v) = make_batch(prefix_lens, extend_lens, seed=3)
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 0, HEAD_DIM**-0.5, batch)
    start = 0
    for i, (prefix, n) in enumerate(zip(prefix_lens, extend_lens, strict=True)):
        expected = naive_attention(q[start : start + n], full_k[i], full_v[i], prefix)
        torch.testing.assert_close(out[start : start + n].double(), expected, atol=1e-5, rtol=1e-5)
        start += n
    # The new K/V landed in the pool at out_cache_loc.
    k_cache, v_cache = backend.kv_pool.get_kv(0)
    torch.testing.assert_close(k_cache[batch.out_cache_loc], k)
    torch.testing.assert_close(v_cache[batch.out_cache_loc], v)
