"""Prefix-LM attention (PaliGemma): every token of a request's bidirectional prefix sees the
whole prefix, later tokens are causal, in both backends: the torch backend and the Triton extend
kernel (interpreted on CPU), against torch SDPA with the mask built here. Requests of one batch
mix prefix-LM and causal ones, prefixes that end inside, at and before the new tokens, and
blocks of 16 so a prefix spans several tiles."""

from __future__ import annotations

import pytest
import torch

from tests.support.kernel_testing import DEVICE, assert_close, build_paged_kv, sdpa_causal
from tests.unit.model.test_model_attention import make_batch
from vla_kernels.extend_attention import extend_attention, extend_attention_reference

FP32, FP16 = torch.float32, torch.float16

# (cached prefix lens, new-token lens, bidirectional prefix lens (absolute, 0: causal))
BATCHES = {
    "whole-prompt-prefix": ([0], [21], [21]),
    "prefix-inside-new-tokens": ([0, 0], [37, 9], [30, 0]),
    "cached-part-of-the-prefix": ([7, 5, 0], [25, 1, 18], [20, 0, 18]),
    "prefix-already-cached": ([24, 3], [6, 40], [20, 35]),
}


def _expected(kv, q, k, v, starts, prefix_lens, extend_lens, lm_lens, scale):
    out = torch.empty(q.shape)
    for i, n in enumerate(extend_lens):
        rows = slice(int(starts[i]), int(starts[i]) + n)
        keys = torch.cat([kv.dense_k[i], k[rows]])
        values = torch.cat([kv.dense_v[i], v[rows]])
        out[rows] = sdpa_causal(q[rows], keys, values, scale, prefix_lens[i], lm_lens[i])
    return out


def _inputs(prefix_lens, extend_lens, dtype, seed, heads=4, kv_heads=1, dim=32):
    kv = build_paged_kv(prefix_lens, kv_heads, dim, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = sum(extend_lens)
    q, k, v = (torch.randn((tokens, h, dim), generator=gen).to(dtype) for h in (heads, 1, 1))
    lens = torch.tensor(extend_lens)
    return kv, q, k, v, torch.cumsum(lens, 0) - lens


@pytest.mark.parametrize("dtype", [FP32, FP16])
@pytest.mark.parametrize("case", BATCHES.values(), ids=BATCHES.keys())
def test_triton_extend_sees_the_bidirectional_prefix(case, dtype):
    pytest.importorskip("triton")
    prefix_lens, extend_lens, lm_lens = case
    kv, q, k, v, starts = _inputs(prefix_lens, extend_lens, dtype, seed=3)
    scale = 32**-0.5
    lens = [torch.tensor(x, device=DEVICE) for x in (prefix_lens, extend_lens)]
    out = extend_attention(
        *(t.to(DEVICE) for t in (q, k, v)), kv.k_buffer, kv.v_buffer, kv.req_to_token,
        kv.req_pool_indices, *lens, starts.to(DEVICE), scale,
        prefix_lm_lens=torch.tensor(lm_lens, device=DEVICE), block_m=16, block_n=16,
    )  # fmt: skip
    expected = _expected(kv, q, k, v, starts, prefix_lens, extend_lens, lm_lens, scale)
    assert_close(out, expected)


def test_reference_sees_the_bidirectional_prefix():
    prefix_lens, extend_lens, lm_lens = BATCHES["cached-part-of-the-prefix"]
    kv, q, k, v, starts = _inputs(prefix_lens, extend_lens, FP32, seed=5)
    out = extend_attention_reference(
        q, k, v, kv.k_buffer.cpu(), kv.v_buffer.cpu(), kv.req_to_token.cpu(),
        kv.req_pool_indices.cpu(), torch.tensor(prefix_lens), torch.tensor(extend_lens), starts,
        0.25, prefix_lm_lens=torch.tensor(lm_lens),
    )  # fmt: skip
    assert_close(out, _expected(kv, q, k, v, starts, prefix_lens, extend_lens, lm_lens, 0.25))


@pytest.mark.parametrize("case", BATCHES.values(), ids=BATCHES.keys())
def test_torch_backend_sees_the_bidirectional_prefix(case):
    prefix_lens, extend_lens, lm_lens = case
    backend, batch, (q, k, v), (full_k, full_v) = make_batch(prefix_lens, extend_lens, seed=9)
    batch.prefix_lm_lens = torch.tensor(lm_lens)
    batch.prefix_lm_lens_cpu = lm_lens
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 0, q.shape[-1] ** -0.5, batch)
    start = 0
    for i, n in enumerate(extend_lens):
        expected = sdpa_causal(
            q[start : start + n], full_k[i], full_v[i], q.shape[-1] ** -0.5, prefix_lens[i],
            lm_lens[i],
        )  # fmt: skip
        torch.testing.assert_close(out[start : start + n], expected, atol=1e-5, rtol=1e-5)
        start += n


def test_a_prefix_changes_what_its_first_token_sees():
    """The mask is not causal: with a bidirectional prefix the first token's output differs."""
    backend, batch, (q, k, v), _ = make_batch([0], [12], seed=2)
    backend.init_forward_metadata(batch)
    causal = backend.forward(q, k, v, 0, 0.25, batch)
    batch.prefix_lm_lens, batch.prefix_lm_lens_cpu = torch.tensor([12]), [12]
    backend.init_forward_metadata(batch)
    bidirectional = backend.forward(q, k, v, 0, 0.25, batch)
    assert not torch.allclose(causal[0], bidirectional[0])
