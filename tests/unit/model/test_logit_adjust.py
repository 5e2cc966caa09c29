"""Logit adjustments against transformers' own logits processors (repetition penalty, min new
tokens, sequence bias) and, where transformers has none, an independent numpy reference of
OpenAI's frequency/presence formula. Rows of a batch that ask for nothing stay untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

from vla_server.model.sampling import SamplingBatchInfo, SamplingParams, TokenHistory

V = 64
EOS = frozenset({2})
PROMPT = [5, 9, 9, 17, 30]
OUTPUT = [9, 40, 40, 40, 3, 17]


def logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * 3


def adjusted(params: list[SamplingParams], x: torch.Tensor) -> torch.Tensor:
    hist = [TokenHistory(PROMPT, OUTPUT)] * len(params)
    info = SamplingBatchInfo.build(params, V, "cpu", histories=hist, eos_token_ids=EOS)
    return info.adjusted(x)


def seq() -> torch.Tensor:
    return torch.tensor([PROMPT + OUTPUT])


@pytest.mark.parametrize("penalty", [0.5, 1.3, 2.0])
def test_repetition_penalty_equals_transformers(penalty):
    x = logits(1, seed=1)
    ref = RepetitionPenaltyLogitsProcessor(penalty)(seq(), x.clone())
    got = adjusted([SamplingParams(repetition_penalty=penalty)], x)
    torch.testing.assert_close(got, ref)


def test_min_new_tokens_equals_transformers():
    x = logits(1, seed=2)
    for min_new in (len(OUTPUT), len(OUTPUT) + 1, len(OUTPUT) + 5):
        proc = MinNewTokensLengthLogitsProcessor(len(PROMPT), min_new, list(EOS | {7}))
        ref = proc(seq(), x.clone())
        params = SamplingParams(min_new_tokens=min_new, stop_token_ids=[7])
        torch.testing.assert_close(adjusted([params], x), ref)


def test_logit_bias_equals_transformers_sequence_bias():
    x = logits(1, seed=3)
    bias = {"4": 2.5, "11": -100.0, "63": 0.25}
    ref = SequenceBiasLogitsProcessor({(int(k),): v for k, v in bias.items()})(seq(), x.clone())
    torch.testing.assert_close(adjusted([SamplingParams(logit_bias=bias)], x), ref)


@pytest.mark.parametrize(("freq", "pres"), [(0.7, 0.0), (0.0, 1.1), (-0.5, 2.0)])
def test_frequency_and_presence_follow_openai_formula(freq, pres):
    x = logits(1, seed=4)
    counts = np.bincount(OUTPUT, minlength=V)  # output tokens only, not the prompt
    ref = x.double().numpy()[0] - counts * freq - (counts > 0) * pres
    got = adjusted([SamplingParams(frequency_penalty=freq, presence_penalty=pres)], x)
    np.testing.assert_allclose(got.double().numpy()[0], ref, atol=1e-5)


def test_rows_without_adjustments_are_untouched_and_input_is_not_changed():
    x = logits(3, seed=5)
    before = x.clone()
    params = [SamplingParams(), SamplingParams(repetition_penalty=1.5), SamplingParams()]
    got = adjusted(params, x)
    torch.testing.assert_close(x, before)
    torch.testing.assert_close(got[[0, 2]], x[[0, 2]])
    assert not torch.equal(got[1], x[1])


def test_no_adjustment_costs_nothing():
    info = SamplingBatchInfo.build([SamplingParams(), SamplingParams(top_k=3)], V, "cpu")
    x = logits(2)
    assert info.adjust is None and info.adjusted(x) is x


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("frequency_penalty", 2.5),
        ("presence_penalty", -3.0),
        ("repetition_penalty", 0.0),
        ("min_new_tokens", 200),
        ("logit_bias", {str(V): 1.0}),
        ("logit_bias", {"x": 1.0}),
        ("n", 0),
    ],
)
def test_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value}).validate(V)
