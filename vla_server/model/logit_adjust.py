"""Per-request changes to the raw logits before sampling: penalties, logit bias, min tokens.

Applied in this order, each only on the rows that ask for it (a batch where no request does pays
nothing):

1. repetition penalty (transformers' `RepetitionPenaltyLogitsProcessor`, SGLang's): a logit of a
   token seen in the prompt or the output is divided by the penalty when positive and
   multiplied by it when negative;
2. frequency and presence penalties (OpenAI's formula): `logit -= count * frequency +
   (count > 0) * presence`, counting the output tokens only;
3. logit bias: the bias of each listed token id is added;
4. min new tokens: while a request has fewer output tokens than `min_new_tokens`, its EOS and
   stop token ids are masked (-inf), as transformers' `MinNewTokensLengthLogitsProcessor`
   (with `ignore_eos` too, as transformers and SGLang do).

Logprobs are those of the adjusted logits (SGLang's convention): the distribution the request
was actually sampled from, before temperature and filtering.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vla_server.model.sampling_params import SamplingParams


@dataclass
class TokenHistory:
    """What a request has seen so far: its prompt and the output tokens before this step."""

    prompt_ids: Sequence[int]
    output_ids: Sequence[int]


@dataclass
class LogitAdjustments:
    rows: torch.Tensor  # [R] int64: the batch rows with any adjustment
    repetition: torch.Tensor | None  # [R, 1]; 1.0 on rows without it
    seen: torch.Tensor | None  # [R, V] bool: token in prompt or output
    frequency: torch.Tensor | None  # [R, 1]
    presence: torch.Tensor | None  # [R, 1]
    counts: torch.Tensor | None  # [R, V] float: output token counts
    bias: torch.Tensor | None  # [R, V] float
    blocked: torch.Tensor | None  # [R, V] bool: masked (min new tokens not reached)

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        histories: Sequence[TokenHistory | None],
        vocab_size: int,
        device: str | torch.device,
        eos_token_ids: frozenset[int] = frozenset(),
    ) -> LogitAdjustments | None:
        """None when no request adjusts its logits. `histories[i]` is needed (not None) for the
        requests with `params[i].needs_history`."""
        rows = [i for i, p in enumerate(params) if p.adjusts_logits]
        if not rows:
            return None
        ps = [params[i] for i in rows]
        hs = [histories[i] for i in rows]

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)[:, None]

        out = cls(torch.tensor(rows, device=device), None, None, None, None, None, None, None)
        if any(p.repetition_penalty != 1.0 for p in ps):
            out.repetition = column([p.repetition_penalty for p in ps])
            seqs = [[] if h is None else [*h.prompt_ids, *h.output_ids] for h in hs]
            out.seen = _counts(seqs, vocab_size, device) > 0
        if any(p.frequency_penalty != 0.0 or p.presence_penalty != 0.0 for p in ps):
            out.frequency = column([p.frequency_penalty for p in ps])
            out.presence = column([p.presence_penalty for p in ps])
            out.counts = _counts(
                [[] if h is None else h.output_ids for h in hs], vocab_size, device
            )
        if any(p.logit_bias for p in ps):
            out.bias = _bias([p.logit_bias or {} for p in ps], vocab_size, device)
        out.blocked = _blocked(ps, hs, vocab_size, device, eos_token_ids)
        return out

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Adjusted float32 logits [B, V]; `logits` itself is left as it is."""
        out = logits.to(torch.float32, copy=True)
        x = out[self.rows]
        if self.repetition is not None and self.seen is not None:
            penalised = torch.where(x > 0, x / self.repetition, x * self.repetition)
            x = torch.where(self.seen, penalised, x)
        if self.counts is not None:
            assert self.frequency is not None and self.presence is not None
            x = x - self.counts * self.frequency - (self.counts > 0).float() * self.presence
        if self.bias is not None:
            x = x + self.bias
        if self.blocked is not None:
            x = x.masked_fill(self.blocked, float("-inf"))
        out[self.rows] = x
        return out


def _counts(
    seqs: Sequence[Sequence[int]], vocab_size: int, device: str | torch.device
) -> torch.Tensor:
    counts = torch.zeros((len(seqs), vocab_size), dtype=torch.float32, device=device)
    for i, seq in enumerate(seqs):
        if seq:
            ids = torch.tensor(list(seq), dtype=torch.int64, device=device)
            counts[i].index_add_(0, ids, torch.ones(len(seq), device=device))
    return counts


def _bias(
    biases: Sequence[dict[str, float]], vocab_size: int, device: str | torch.device
) -> torch.Tensor:
    bias = torch.zeros((len(biases), vocab_size), dtype=torch.float32, device=device)
    for i, b in enumerate(biases):
        for token, value in b.items():
            bias[i, int(token)] += value
    return bias


def _blocked(
    params: Sequence[SamplingParams],
    histories: Sequence[TokenHistory | None],
    vocab_size: int,
    device: str | torch.device,
    eos_token_ids: frozenset[int],
) -> torch.Tensor | None:
    under = [
        p.min_new_tokens > 0 and h is not None and len(h.output_ids) < p.min_new_tokens
        for p, h in zip(params, histories, strict=True)
    ]
    if not any(under):
        return None
    blocked = torch.zeros((len(params), vocab_size), dtype=torch.bool, device=device)
    for i, (p, u) in enumerate(zip(params, under, strict=True)):
        if u:
            ids = {*p.stop_token_ids, *eos_token_ids}
            blocked[i, sorted(t for t in ids if 0 <= t < vocab_size)] = True
    return blocked
