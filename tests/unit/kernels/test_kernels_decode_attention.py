"""Triton paged decode attention (split-K) against torch SDPA on the dense per-request K/V.

Runs through the Triton interpreter on CPU (see kernel_testing), compiled on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.kernel_testing import DEVICE, assert_close, build_paged_kv, sdpa_causal
from vla_kernels.decode_attention import decode_attention, decode_attention_reference

pytest.importorskip("triton")

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16

# (q_heads, kv_heads, head_dim, dtype, context_lens, num_kv_splits, block_n); block 16 makes
# short contexts span several blocks, and lengths are mostly not multiples of it.
CASES = {
    "mha-d64-fp32": (2, 2, 64, FP32, [1, 23], 1, 16),
    "gqa4-d80-fp32-3splits": (8, 2, 80, FP32, [5, 17, 40], 3, 16),
    "gqa8-d128-fp16-4splits": (8, 1, 128, FP16, [1, 16, 33, 47], 4, 16),
    "gqa4-d64-bf16-2splits": (4, 1, 64, BF16, [9, 30], 2, 16),
    "batch8-lens1to8-fp16": (4, 1, 64, FP16, list(range(1, 9)), 2, 16),
    "mha-d80-fp16-mostly-empty-splits": (2, 2, 80, FP16, [3, 20], 8, 16),
    "default-blocks-fp32": (4, 1, 64, FP32, [1, 70, 130], None, 64),
}


def _expected(kv, q: torch.Tensor, scale: float) -> torch.Tensor:
    rows = [
        sdpa_causal(q[i : i + 1], k, v, scale, k.shape[0] - 1)[0]
        for i, (k, v) in enumerate(zip(kv.dense_k, kv.dense_v, strict=True))
    ]
    return torch.stack(rows)


def _run_case(q_heads, kv_heads, head_dim, dtype, lens, splits, block_n, seed=0, q_gain=1.0):
    kv = build_paged_kv(lens, kv_heads, head_dim, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = (torch.randn((len(lens), q_heads, head_dim), generator=gen) * q_gain).to(dtype)
    seq_lens = torch.tensor(lens, device=DEVICE)
    scale = head_dim**-0.5
    out = decode_attention(
        q.to(DEVICE), kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, seq_lens,
        scale, num_kv_splits=splits, block_n=block_n,
    )  # fmt: skip
    assert out.dtype == dtype and out.shape == q.shape
    assert_close(out, _expected(kv, q, scale))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_decode_matches_sdpa(case):
    _run_case(*case)


def test_split_merge_is_stable_for_large_logits():
    # Scores in the hundreds: exp() overflows fp32 unless every split and the merge subtract maxima.
    _run_case(4, 2, 64, FP32, [7, 45], 4, 16, seed=3, q_gain=60.0)


def test_new_token_slots_override_the_missing_table_entry():
    lens = [6, 19]
    kv = build_paged_kv(lens, 2, 64, FP32, seed=5)
    rows = kv.req_pool_indices.tolist()
    new_slots = torch.stack([kv.req_to_token[r, n - 1] for r, n in zip(rows, lens, strict=True)])
    for r, n in zip(rows, lens, strict=True):
        kv.req_to_token[r, n - 1] = 0  # the scheduler has not recorded the new token yet
    q = torch.randn((2, 4, 64))
    out = decode_attention(
        q.to(DEVICE), kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices,
        torch.tensor(lens, device=DEVICE), 0.125, new_token_slots=new_slots, block_n=16,
    )  # fmt: skip
    assert_close(out, _expected(kv, q, 0.125))


def test_reference_matches_sdpa():
    lens = [1, 12, 29]
    kv = build_paged_kv(lens, 2, 80, FP32, seed=7)
    q = torch.randn((3, 8, 80))
    ref = decode_attention_reference(
        q.to(DEVICE), kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices,
        torch.tensor(lens), 80**-0.5,
    )  # fmt: skip
    assert_close(ref, _expected(kv, q, 80**-0.5))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_decode_7b_heads_longer_contexts(dtype):
    lens = torch.randint(1, 300, (6,), generator=torch.Generator().manual_seed(11)).tolist()
    _run_case(32, 8, 128, dtype, lens, 4, 64, seed=11)
