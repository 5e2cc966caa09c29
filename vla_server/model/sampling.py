"""Sampling parameters' batched tensors, the sampler and logprobs.

The caller first applies the requests' logit adjustments (`SamplingBatchInfo.adjusted`:
penalties, logit bias, min tokens; see `logit_adjust.py`). Sampling order: the optional
vocabulary mask (constrained decoding), temperature, then the token set is cut to the
intersection of top-k, top-p (smallest prefix of the descending distribution whose mass reaches
`top_p`) and min-p (tokens with at least `min_p` times the top probability), and one token is
drawn by inverse CDF with a single uniform per request. A request with a seed draws its uniform
from its own `torch.Generator`, created once and passed back on later steps, so its tokens do
not depend on the other requests in the batch. Logprobs are those of the adjusted logits,
before mask, temperature or filtering.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vla_server.model.logit_adjust import LogitAdjustments, TokenHistory
from vla_server.model.sampling_params import SamplingParams

__all__ = [
    "Logprobs",
    "SamplingBatchInfo",
    "SamplingParams",
    "TokenHistory",
    "compute_logprobs",
    "sample",
]


def make_generator(seed: int, device: str | torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


@dataclass
class SamplingBatchInfo:
    temperatures: torch.Tensor  # [B, 1] float32; 1.0 for greedy rows
    top_ks: torch.Tensor  # [B] int64; vocab_size when off
    top_ps: torch.Tensor  # [B] float32
    min_ps: torch.Tensor  # [B] float32
    greedy: torch.Tensor  # [B] bool
    all_greedy: bool
    any_greedy: bool
    needs_sort: bool  # some row uses top-k, top-p or min-p
    vocab_mask: torch.Tensor | None  # [B, V] bool, True = allowed
    # Per request: its generator when it has a seed. Keep them with the requests and pass them
    # back to `build` on later steps, so each seeded request continues its own random stream.
    generators: list[torch.Generator | None]
    adjust: LogitAdjustments | None = None  # None: no request changes its logits

    @classmethod
    def build(
        cls,
        params_list: Sequence[SamplingParams],
        vocab_size: int,
        device: str | torch.device,
        *,
        masks: Sequence[torch.Tensor | None] | None = None,
        generators: Sequence[torch.Generator | None] | None = None,
        histories: Sequence[TokenHistory | None] | None = None,
        eos_token_ids: frozenset[int] = frozenset(),
    ) -> SamplingBatchInfo:
        """`histories` (each request's prompt and output so far) is read only for the requests
        whose parameters adjust their logits."""
        greedy = [p.is_greedy for p in params_list]
        top_ks = [vocab_size if p.top_k < 0 else min(p.top_k, vocab_size) for p in params_list]
        gens = list(generators) if generators is not None else [None] * len(params_list)
        for i, p in enumerate(params_list):
            if gens[i] is None and p.random_seed is not None:
                gens[i] = make_generator(p.random_seed, device)
        sampled = [p for p, g in zip(params_list, greedy, strict=True) if not g]
        return cls(
            temperatures=torch.tensor(
                [[1.0 if g else p.temperature] for p, g in zip(params_list, greedy, strict=True)],
                dtype=torch.float32,
                device=device,
            ),
            top_ks=torch.tensor(top_ks, dtype=torch.int64, device=device),
            top_ps=torch.tensor([p.top_p for p in params_list], dtype=torch.float32, device=device),
            min_ps=torch.tensor([p.min_p for p in params_list], dtype=torch.float32, device=device),
            greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
            all_greedy=all(greedy),
            any_greedy=any(greedy),
            needs_sort=any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in sampled),
            vocab_mask=_stack_masks(masks, vocab_size, device),
            generators=gens,
            adjust=LogitAdjustments.build(
                params_list,
                histories or [None] * len(params_list),
                vocab_size,
                device,
                eos_token_ids,
            ),
        )

    def adjusted(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits to sample from and score logprobs on."""
        return logits if self.adjust is None else self.adjust.apply(logits)


def _stack_masks(
    masks: Sequence[torch.Tensor | None] | None, vocab_size: int, device: str | torch.device
) -> torch.Tensor | None:
    if masks is None or all(m is None for m in masks):
        return None
    full = torch.ones(vocab_size, dtype=torch.bool, device=device)
    return torch.stack(
        [full if m is None else m.to(device=device, dtype=torch.bool) for m in masks]
    )


def sample(logits: torch.Tensor, info: SamplingBatchInfo) -> torch.Tensor:
    """Next token ids [B] (int64) for float logits [B, V]."""
    if info.vocab_mask is not None:
        logits = logits.masked_fill(~info.vocab_mask, float("-inf"))
    if info.all_greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / info.temperatures, dim=-1)
    order = None
    if info.needs_sort:
        probs, order = _filter_sorted(probs, info)
    cdf = probs.cumsum(dim=-1)
    # 1 - u lies in (0, 1]: the first index whose cdf reaches a positive target has p > 0,
    # so a token outside the kept set can never be drawn.
    target = (1.0 - _uniforms(info, logits.shape[0], logits.device)) * cdf[:, -1]
    index = torch.searchsorted(cdf, target[:, None]).clamp_(max=logits.shape[1] - 1)
    ids = index.squeeze(1) if order is None else order.gather(1, index).squeeze(1)
    if info.any_greedy:
        ids = torch.where(info.greedy, logits.argmax(dim=-1), ids)
    return ids


def _filter_sorted(
    probs: torch.Tensor, info: SamplingBatchInfo
) -> tuple[torch.Tensor, torch.Tensor]:
    """Descending probabilities with the tokens outside top-k/top-p/min-p zeroed, and their ids."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[1], device=probs.device)
    keep = ranks[None, :] < info.top_ks[:, None]
    # top_p == 1 is off: rounding can push the mass before a tail token to 1.0.
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep &= (mass_before < info.top_ps[:, None]) | (info.top_ps[:, None] >= 1.0)
    keep &= sorted_probs >= info.min_ps[:, None] * sorted_probs[:, :1]
    return sorted_probs.masked_fill_(~keep, 0.0), order


def _uniforms(info: SamplingBatchInfo, batch_size: int, device: torch.device) -> torch.Tensor:
    u = torch.rand(batch_size, device=device)
    seeded = [i for i, g in enumerate(info.generators) if g is not None]
    if seeded:
        draws = [torch.rand(1, generator=info.generators[i], device=device) for i in seeded]
        u[torch.tensor(seeded, device=device)] = torch.cat(draws)
    return u


@dataclass
class Logprobs:
    token_logprobs: list[float]  # logprob of each given token
    top_logprobs: list[list[tuple[float, int]]]  # per row, the top (logprob, token id) pairs


def compute_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, top_logprobs_nums: Sequence[int] | int = 0
) -> Logprobs:
    """Logprobs of `token_ids` [N] under raw `logits` [N, V], plus each row's top alternatives."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, token_ids.view(-1, 1).to(torch.int64)).squeeze(1).tolist()
    nums = (
        [top_logprobs_nums] * len(chosen)
        if isinstance(top_logprobs_nums, int)
        else list(top_logprobs_nums)
    )
    k = min(max(nums, default=0), logits.shape[1])
    if k == 0:
        return Logprobs(chosen, [[] for _ in chosen])
    values, ids = logprobs.topk(k, dim=-1)
    values_list, ids_list = values.tolist(), ids.tolist()
    top = [list(zip(values_list[i][:n], ids_list[i][:n], strict=True)) for i, n in enumerate(nums)]
    return Logprobs(chosen, top)
