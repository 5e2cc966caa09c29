"""Benchmark cases for check_gpu: each runs one kernel against its plain-torch reference for
correctness and times it against the torch path it would replace.

Timing goes through a ``bench(fn) -> microseconds`` callable so the same code runs on CUDA with
``triton.testing.do_bench`` and, in tests, on CPU through the interpreter with a stand-in timer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vla_kernels.decode_attention import (
    SplitKWorkspace,
    decode_attention,
    decode_attention_reference,
    default_num_kv_splits,
)
from vla_kernels.extend_attention import extend_attention, extend_attention_reference
from vla_kernels.rmsnorm import add_rmsnorm, add_rmsnorm_reference
from vla_kernels.rotary import rotary_cos_sin_cache, rotary_embedding, rotary_embedding_reference

Bench = Callable[[Callable[[], object]], float]

# Slots are handed out in runs of this many tokens, shuffled: a pool after some churn.
PAGE_TOKENS = 64


@dataclass(frozen=True)
class CheckPlan:
    dtype: torch.dtype = torch.bfloat16
    q_heads: int = 32  # 7B-class attention
    kv_heads: int = 8
    head_dim: int = 128
    decode_batches: tuple[int, ...] = (1, 8, 32)
    decode_contexts: tuple[int, ...] = (256, 1024, 4096)
    # (batch, cached prefix, new tokens per request)
    extend_cases: tuple[tuple[int, int, int], ...] = (
        (1, 0, 512),
        (1, 0, 2048),
        (4, 0, 512),
        (1, 1024, 256),
    )
    # Prefix-LM (PaliGemma / pi0-FAST: 3 cameras + prompt, all but a 3-token tail bidirectional)
    # (batch, cached prefix, new tokens per request)
    prefix_lm_cases: tuple[tuple[int, int, int], ...] = ((1, 0, 820), (4, 0, 820))
    norm_tokens: tuple[int, ...] = (1, 32, 2048)
    hidden: int = 4096


@dataclass
class Row:
    kernel: str
    shape: str
    max_err: float | None
    ok: bool | None
    triton_us: float | None
    torch_us: float | None  # dense SDPA / eager torch
    torch_paged_us: float | None = None  # gather through req_to_token + SDPA (the torch backend)
    note: str = ""


TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _compare(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, bool]:
    tol = TOLERANCE[actual.dtype]
    diff = (actual.float() - expected.float()).abs()
    ok = bool((diff <= tol + tol * expected.float().abs()).all())
    return float(diff.max()), ok


@dataclass
class _Paged:
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    req_to_token: torch.Tensor
    rows: torch.Tensor
    kv_index: torch.Tensor  # int64 [batch, context] slots, for the torch baselines


def _paged(plan: CheckPlan, batch: int, context: int, device: torch.device) -> _Paged:
    pages = -(-batch * context // PAGE_TOKENS)
    order = torch.randperm(pages, device=device)
    slots = (order[:, None] * PAGE_TOKENS + torch.arange(PAGE_TOKENS, device=device)).flatten()
    kv_index = slots[: batch * context].view(batch, context) + 1
    shape = (pages * PAGE_TOKENS + 1, plan.kv_heads, plan.head_dim)
    k_buffer = torch.randn(shape, device=device).to(plan.dtype)
    v_buffer = torch.randn(shape, device=device).to(plan.dtype)
    req_to_token = torch.zeros((batch + 1, context + 1), dtype=torch.int32, device=device)
    rows = torch.randperm(batch + 1, device=device)[:batch]
    req_to_token[rows, :context] = kv_index.to(torch.int32)
    return _Paged(k_buffer, v_buffer, req_to_token, rows, kv_index)


def decode_rows(plan: CheckPlan, device: torch.device, bench: Bench) -> list[Row]:
    rows = []
    for batch in plan.decode_batches:
        for context in plan.decode_contexts:
            rows.append(_decode_row(plan, batch, context, device, bench))
    return rows


def _decode_row(plan: CheckPlan, batch: int, context: int, device, bench: Bench) -> Row:
    p = _paged(plan, batch, context, device)
    q = torch.randn((batch, plan.q_heads, plan.head_dim), device=device).to(plan.dtype)
    seq_lens = torch.full((batch,), context, device=device)
    scale = plan.head_dim**-0.5
    splits = default_num_kv_splits(batch, plan.kv_heads, context, device)
    ws = SplitKWorkspace.allocate(batch, plan.q_heads, splits, plan.head_dim, device)
    args = (q, p.k_buffer, p.v_buffer, p.req_to_token, p.rows, seq_lens, scale)

    def triton_fn() -> torch.Tensor:
        return decode_attention(*args, max_seq_len=context, num_kv_splits=splits, workspace=ws)

    err, ok = _compare(triton_fn(), decode_attention_reference(*args))
    dense_k = p.k_buffer[p.kv_index].transpose(1, 2).contiguous()  # [batch, kv_heads, ctx, dim]
    dense_v = p.v_buffer[p.kv_index].transpose(1, 2).contiguous()

    def sdpa(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q[:, :, None], k, v, scale=scale, enable_gqa=True)

    def paged_sdpa() -> torch.Tensor:
        idx = p.req_to_token[p.rows, :context].long()
        return sdpa(p.k_buffer[idx].transpose(1, 2), p.v_buffer[idx].transpose(1, 2))

    return Row(
        "decode", f"b={batch} ctx={context} splits={splits}", err, ok, bench(triton_fn),
        bench(lambda: sdpa(dense_k, dense_v)), bench(paged_sdpa),
    )  # fmt: skip


def extend_rows(plan: CheckPlan, device: torch.device, bench: Bench) -> list[Row]:
    rows = [_extend_row(plan, *case, device, bench) for case in plan.extend_cases]
    return rows + [_extend_row(plan, *case, device, bench, 3) for case in plan.prefix_lm_cases]


def _extend_row(
    plan: CheckPlan, batch: int, prefix: int, new: int, device, bench: Bench, tail: int = -1
) -> Row:
    """One extend case; with `tail` >= 0 a prefix-LM one: all but the last `tail` tokens of each
    request form its bidirectional prefix."""
    p = _paged(plan, batch, max(prefix, 1), device)
    tokens = batch * new

    def rand(heads: int) -> torch.Tensor:
        return torch.randn((tokens, heads, plan.head_dim), device=device).to(plan.dtype)

    q, k, v = rand(plan.q_heads), rand(plan.kv_heads), rand(plan.kv_heads)
    lens = torch.full((batch,), new, device=device)
    prefixes = torch.full((batch,), prefix, device=device)
    starts = torch.arange(batch, device=device) * new
    scale = plan.head_dim**-0.5
    args = (q, k, v, p.k_buffer, p.v_buffer, p.req_to_token, p.rows, prefixes, lens, starts, scale)
    lm_len = prefix + new - tail if tail >= 0 else 0
    lm = None if tail < 0 else torch.full((batch,), lm_len, device=device)

    def triton_fn() -> torch.Tensor:
        return extend_attention(*args, prefix_lm_lens=lm, max_extend_len=new)

    err, ok = _compare(triton_fn(), extend_attention_reference(*args, prefix_lm_lens=lm))
    # Bottom-right causal mask: new token i sees the prefix and new tokens 0..i (and, prefix-LM,
    # every token of the bidirectional prefix).
    mask = torch.ones((new, prefix + new), dtype=torch.bool, device=device).tril(prefix)
    mask[:, :lm_len] = True

    def sdpa(keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        def heads_first(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, -1, *t.shape[1:]).transpose(1, 2)

        return F.scaled_dot_product_attention(
            heads_first(q), heads_first(keys), heads_first(values), scale=scale,
            attn_mask=None if prefix == lm_len == 0 else mask, is_causal=prefix == lm_len == 0,
            enable_gqa=True,
        )  # fmt: skip

    def with_prefix(buffer: torch.Tensor, new_kv: torch.Tensor) -> torch.Tensor:
        idx = p.req_to_token[p.rows, :prefix].long()
        return torch.cat([buffer[idx], new_kv.view(batch, new, *new_kv.shape[1:])], 1).flatten(0, 1)

    dense_k, dense_v = with_prefix(p.k_buffer, k), with_prefix(p.v_buffer, v)
    kind = "extend" if tail < 0 else "extend prefix-LM"
    return Row(
        kind, f"b={batch} prefix={prefix} new={new}", err, ok, bench(triton_fn),
        bench(lambda: sdpa(dense_k, dense_v)),
        bench(lambda: sdpa(with_prefix(p.k_buffer, k), with_prefix(p.v_buffer, v))),
    )  # fmt: skip


def norm_and_rotary_rows(plan: CheckPlan, device: torch.device, bench: Bench) -> list[Row]:
    rows = []
    for tokens in plan.norm_tokens:
        rows.append(_add_rmsnorm_row(plan, tokens, device, bench))
        rows.append(_rotary_row(plan, tokens, device, bench))
    return rows


def _add_rmsnorm_row(plan: CheckPlan, tokens: int, device: torch.device, bench: Bench) -> Row:
    x, r = (torch.randn((tokens, plan.hidden), device=device).to(plan.dtype) for _ in "xr")
    w = torch.randn(plan.hidden, device=device).to(plan.dtype)
    err, ok = _compare(add_rmsnorm(x, r, w, 1e-6)[0], add_rmsnorm_reference(x, r, w, 1e-6)[0])
    return Row(
        "add+rmsnorm", f"tokens={tokens} hidden={plan.hidden}", err, ok,
        bench(lambda: add_rmsnorm(x, r, w, 1e-6)),
        bench(lambda: add_rmsnorm_reference(x, r, w, 1e-6)),
    )  # fmt: skip


def _rotary_row(plan: CheckPlan, tokens: int, device: torch.device, bench: Bench) -> Row:
    dim = plan.head_dim
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, device=device).float() / dim))
    cache = rotary_cos_sin_cache(inv_freq, 8192)
    positions = torch.randint(0, 8192, (tokens,), device=device)
    q = torch.randn((tokens, plan.q_heads, dim), device=device).to(plan.dtype)
    k = torch.randn((tokens, plan.kv_heads, dim), device=device).to(plan.dtype)
    got = torch.cat(rotary_embedding(positions, q, k, cache), 1)
    err, ok = _compare(got, torch.cat(rotary_embedding_reference(positions, q, k, cache), 1))
    return Row(
        "rotary", f"tokens={tokens} heads={plan.q_heads}/{plan.kv_heads}", err, ok,
        bench(lambda: rotary_embedding(positions, q, k, cache)),
        bench(lambda: rotary_embedding_reference(positions, q, k, cache)),
    )  # fmt: skip
