"""TritonAttentionBackend over real KV pools, driven like the scheduler drives a backend: prefill,
a mixed chunked-prefill/decode batch, then decode steps; every layer's output is checked against
torch SDPA over the K/V history the test keeps itself, and the pool against the written K/V."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from tests.support.kernel_testing import DEVICE, assert_close, sdpa_causal
from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.attention.triton_backend import TritonAttentionBackend
from vla_server.model.forward_batch import ForwardBatch, ForwardMode

pytest.importorskip("triton")


@dataclass
class Driver:
    q_heads: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    num_layers: int = 1
    num_kv_splits: int | None = None
    history: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.table = ReqToTokenPool(4, 64, device=DEVICE)
        self.pool = TokenToKVPool(
            160, self.num_layers, self.kv_heads, self.head_dim, self.dtype, device=DEVICE
        )
        self.backend = TritonAttentionBackend(self.table, self.pool, self.num_kv_splits)
        self.rows: dict[int, int] = {}
        self.gen = torch.Generator().manual_seed(0)

    def length(self, req: int) -> int:
        return self.history[req][0][0].shape[0] if req in self.history else 0

    def step(self, new_tokens: dict[int, int], record_first: bool = True) -> None:
        """record_first: write the new tokens' slots into req_to_token before the forward, as
        the scheduler does; otherwise only after it."""
        batch = self._batch(new_tokens)
        if record_first:
            self._record(batch, list(new_tokens))
        self.backend.init_forward_metadata(batch)
        for layer in range(self.num_layers):
            self._check_layer(batch, list(new_tokens), layer)
        if not record_first:
            self._record(batch, list(new_tokens))

    def _record(self, batch: ForwardBatch, reqs: list[int]) -> None:
        for i, r in enumerate(reqs):
            n, prefix = batch.extend_lens_cpu[i], batch.prefix_lens_cpu[i]
            own = batch.out_cache_loc[self._rows(batch, i)].to(torch.int32)
            self.table.req_to_token[self.rows[r], prefix : prefix + n] = own

    @staticmethod
    def _rows(batch: ForwardBatch, i: int) -> slice:
        first = int(batch.extend_start_loc[i])
        return slice(first, first + batch.extend_lens_cpu[i])

    def _batch(self, new_tokens: dict[int, int]) -> ForwardBatch:
        reqs, lens = list(new_tokens), list(new_tokens.values())
        prefix = [self.length(r) for r in reqs]
        slots = self.pool.allocator.alloc(sum(lens)).to(DEVICE)
        for r in reqs:
            self.rows.setdefault(r, self.table.alloc())
        as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int64, device=DEVICE)  # noqa: E731
        lens_t = as_tensor(lens)
        starts = lens_t.cumsum(0) - lens_t
        positions = torch.cat([torch.arange(p, p + n) for p, n in zip(prefix, lens, strict=True)])
        seq_lens = [p + n for p, n in zip(prefix, lens, strict=True)]
        mode = ForwardMode.DECODE if all(n == 1 for n in lens) else ForwardMode.EXTEND
        return ForwardBatch(
            mode, len(reqs), torch.zeros(sum(lens), dtype=torch.int64, device=DEVICE),
            positions.to(DEVICE), as_tensor([self.rows[r] for r in reqs]), as_tensor(seq_lens),
            as_tensor(prefix), lens_t, starts, slots, seq_lens, prefix, lens,
        )  # fmt: skip

    def _check_layer(self, batch: ForwardBatch, reqs: list[int], layer: int) -> None:
        shape = (batch.num_tokens, self.q_heads, self.head_dim)
        q = torch.randn(shape, generator=self.gen).to(self.dtype)
        k, v = (
            torch.randn((shape[0], self.kv_heads, self.head_dim), generator=self.gen).to(self.dtype)
            for _ in range(2)
        )
        scale = self.head_dim**-0.5
        out = self.backend.forward(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), layer, scale, batch)
        k_pool, v_pool = self.pool.get_kv(layer)
        assert torch.equal(k_pool[batch.out_cache_loc].cpu(), k)
        assert torch.equal(v_pool[batch.out_cache_loc].cpu(), v)
        expected = torch.empty(shape)
        for i, r in enumerate(reqs):
            rows = self._rows(batch, i)
            layers = self.history.setdefault(r, [(k[:0], v[:0])] * self.num_layers)
            old_k, old_v = layers[layer]
            keys, values = torch.cat([old_k, k[rows]]), torch.cat([old_v, v[rows]])
            layers[layer] = (keys, values)
            expected[rows] = sdpa_causal(q[rows], keys, values, scale, batch.prefix_lens_cpu[i])
        assert out.shape == shape and out.dtype == self.dtype
        assert_close(out, expected)


def _prefill_mixed_then_decode(driver: Driver, record_first: bool = True) -> None:
    driver.step({0: 5, 1: 18, 2: 1}, record_first)
    # chunked prefill, a decoding request and a 1-token prefix in one EXTEND batch
    driver.step({0: 7, 1: 1, 2: 17}, record_first)
    for _ in range(2):
        driver.step({0: 1, 1: 1, 2: 1}, record_first)


def test_gqa4_fp32_two_layers_split_decode():
    _prefill_mixed_then_decode(Driver(4, 1, 64, torch.float32, num_layers=2, num_kv_splits=2))


def test_mha_d80_fp16_before_the_table_records_the_new_tokens():
    # New tokens' slots come from out_cache_loc, as in the torch backend, not from req_to_token.
    _prefill_mixed_then_decode(Driver(2, 2, 80, torch.float16), record_first=False)


def test_gqa8_bf16():
    _prefill_mixed_then_decode(Driver(8, 1, 64, torch.bfloat16, num_kv_splits=3))
