"""Triton extend (prefill) attention against torch SDPA: each request's new tokens see its cached
prefix (gathered from the paged pool) and, causally, each other; ragged batches, GQA.

Runs through the Triton interpreter on CPU (see kernel_testing), compiled on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.kernel_testing import DEVICE, assert_close, build_paged_kv, sdpa_causal
from vla_kernels.extend_attention import extend_attention, extend_attention_reference

pytest.importorskip("triton")

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16

# (q_heads, kv_heads, head_dim, dtype, prefix_lens, extend_lens, block_m, block_n). Blocks of 16
# make short requests span several tiles; prefixes include 0, multiples of 16 and non-multiples.
CASES = {
    "prefill-only-mha-d64-fp32": (2, 2, 64, FP32, [0], [7], 16, 16),
    "gqa4-d80-fp32": (8, 2, 80, FP32, [0, 17, 5], [1, 20, 33], 16, 16),
    "gqa8-d128-fp16": (8, 1, 128, FP16, [3, 0, 40], [17, 9, 1], 16, 16),
    "gqa4-d64-bf16": (4, 1, 64, BF16, [16, 33], [16, 5], 16, 16),
    "batch8-ext1to8-fp16": (4, 1, 64, FP16, [0, 1, 15, 16, 17, 31, 32, 33], [*range(1, 9)], 16, 16),
    "default-blocks-fp32": (2, 2, 64, FP32, [70, 0], [65, 3], 64, 64),
}


def _inputs(q_heads, kv_heads, head_dim, dtype, prefix_lens, extend_lens, seed):
    kv = build_paged_kv(prefix_lens, kv_heads, head_dim, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = sum(extend_lens)
    q = torch.randn((tokens, q_heads, head_dim), generator=gen).to(dtype)
    k = torch.randn((tokens, kv_heads, head_dim), generator=gen).to(dtype)
    v = torch.randn((tokens, kv_heads, head_dim), generator=gen).to(dtype)
    lens = torch.tensor(extend_lens)
    starts = torch.cumsum(lens, 0) - lens
    return kv, q, k, v, starts


def _expected(kv, q, k, v, starts, extend_lens, scale):
    out = torch.empty(q.shape)
    for i, n in enumerate(extend_lens):
        rows = slice(int(starts[i]), int(starts[i]) + n)
        keys = torch.cat([kv.dense_k[i], k[rows]])
        values = torch.cat([kv.dense_v[i], v[rows]])
        out[rows] = sdpa_causal(q[rows], keys, values, scale, kv.dense_k[i].shape[0])
    return out


def _run(q_heads, kv_heads, head_dim, dtype, prefix_lens, extend_lens, block_m, block_n, seed=0):
    kv, q, k, v, starts = _inputs(
        q_heads, kv_heads, head_dim, dtype, prefix_lens, extend_lens, seed
    )
    scale = head_dim**-0.5
    dev = [t.to(DEVICE) for t in (q, k, v)]
    lens = [torch.tensor(x, device=DEVICE) for x in (prefix_lens, extend_lens)]
    out = extend_attention(
        *dev, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, *lens,
        starts.to(DEVICE), scale, block_m=block_m, block_n=block_n,
    )  # fmt: skip
    assert out.dtype == dtype and out.shape == q.shape
    assert_close(out, _expected(kv, q, k, v, starts, extend_lens, scale))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_extend_matches_sdpa(case):
    _run(*case)


def test_strided_q_from_a_fused_projection():
    # q/k/v as views of one [tokens, heads, dim] projection: row strides differ from the shape's.
    prefix_lens, extend_lens, heads, dim = [9], [13], 4, 64
    kv, _, _, _, starts = _inputs(heads, 2, dim, FP32, prefix_lens, extend_lens, seed=4)
    qkv = torch.randn((13, heads + 4, dim))
    q, k, v = qkv[:, :heads], qkv[:, heads : heads + 2], qkv[:, heads + 2 :]
    out = extend_attention(
        q, k, v, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices,
        torch.tensor(prefix_lens), torch.tensor(extend_lens), starts, 0.125, block_m=16, block_n=16,
    )  # fmt: skip
    assert_close(out, _expected(kv, q, k, v, starts, extend_lens, 0.125))


def test_reference_matches_sdpa():
    prefix_lens, extend_lens = [0, 11, 4], [5, 1, 9]
    kv, q, k, v, starts = _inputs(8, 2, 80, FP32, prefix_lens, extend_lens, seed=6)
    ref = extend_attention_reference(
        q, k, v, kv.k_buffer.cpu(), kv.v_buffer.cpu(), kv.req_to_token.cpu(),
        kv.req_pool_indices.cpu(), torch.tensor(prefix_lens), torch.tensor(extend_lens), starts,
        80**-0.5,
    )  # fmt: skip
    assert_close(ref, _expected(kv, q, k, v, starts, extend_lens, 80**-0.5))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_extend_7b_heads_longer_prefixes(dtype):
    _run(32, 8, 128, dtype, [0, 100, 150], [90, 40, 1], 32, 32, seed=12)
