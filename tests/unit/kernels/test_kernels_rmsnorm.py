"""Triton RMSNorm (+ fused residual add) against transformers' own LlamaRMSNorm."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from tests.support.kernel_testing import DEVICE, assert_close
from vla_kernels.rmsnorm import add_rmsnorm, add_rmsnorm_reference, rmsnorm, rmsnorm_reference

pytest.importorskip("triton")

EPS = 1e-6
SHAPES = [(1, 64), (5, 96), (3, 200)]  # 96 and 200: hidden sizes that are not a power of 2
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _hf_norm(hidden: int, weight: torch.Tensor) -> LlamaRMSNorm:
    norm = LlamaRMSNorm(hidden, eps=EPS).to(weight.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


def _tensors(rows: int, hidden: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(rows * hidden)
    x, residual = (torch.randn((rows, hidden), generator=gen).to(dtype) for _ in range(2))
    weight = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(dtype)
    return x, residual, weight


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rmsnorm_matches_llama(shape, dtype):
    x, _, weight = _tensors(*shape, dtype)
    with torch.no_grad():
        expected = _hf_norm(shape[1], weight)(x)
    assert_close(rmsnorm(x.to(DEVICE), weight.to(DEVICE), EPS), expected)
    torch.testing.assert_close(rmsnorm_reference(x, weight, EPS), expected, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_rmsnorm_matches_residual_then_llama_norm(shape, dtype):
    x, residual, weight = _tensors(*shape, dtype)
    summed = residual + x  # the Llama decoder layer's residual connection
    with torch.no_grad():
        expected = _hf_norm(shape[1], weight)(summed)
    normed, new_residual = add_rmsnorm(x.to(DEVICE), residual.to(DEVICE), weight.to(DEVICE), EPS)
    assert_close(new_residual, summed)
    assert_close(normed, expected)
    ref_normed, ref_residual = add_rmsnorm_reference(x, residual, weight, EPS)
    torch.testing.assert_close(ref_residual, summed, atol=0, rtol=0)
    torch.testing.assert_close(ref_normed, expected, atol=0, rtol=0)
