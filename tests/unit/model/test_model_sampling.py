"""Sampler: validation, filtered sets, distributions, seeds, masks and logprobs.

Allowed sets and target distributions are computed here independently (numpy, float64) from
the definitions in `vla_server.model.sampling`'s docstring.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch

from vla_server.model.sampling import (
    SamplingBatchInfo,
    SamplingParams,
    compute_logprobs,
    sample,
)

V = 40
DRAWS = 4000


def logits_row(seed: int, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(V, generator=torch.Generator().manual_seed(seed)) * scale


def softmax64(logits: torch.Tensor, temperature: float = 1.0) -> np.ndarray:
    x = logits.double().numpy() / temperature
    e = np.exp(x - x.max())
    return e / e.sum()


def allowed_set(probs: np.ndarray, top_k: int, top_p: float, min_p: float) -> set[int]:
    order = np.argsort(-probs)
    keep = set(order[:top_k].tolist()) if top_k > 0 else set(range(len(probs)))
    if top_p < 1:
        nucleus, mass = set(), 0.0
        for token in order:
            nucleus.add(int(token))
            mass += probs[token]
            if mass >= top_p:
                break
        keep &= nucleus
    if min_p > 0:
        keep &= {i for i, p in enumerate(probs) if p >= min_p * probs.max()}
    return keep


def draw(params: SamplingParams, logits: torch.Tensor, n: int = DRAWS, seed: int = 0) -> np.ndarray:
    torch.manual_seed(seed)
    info = SamplingBatchInfo.build([params] * n, V, "cpu")
    return sample(logits.expand(n, V).clone(), info).numpy()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_new_tokens", -1),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", 0),
        ("top_k", -2),
        ("min_p", -0.1),
        ("min_p", 1.1),
        ("stop_token_ids", [V]),
    ],
)
def test_validation_names_the_field(field, value):
    params = SamplingParams(**{field: value})
    with pytest.raises(ValueError, match=f"^{field} "):
        params.validate(V)


def test_defaults_validate_and_round_trip_on_the_wire():
    params = SamplingParams(temperature=0.7, top_k=5, seed=3, stop=["\n"], stop_token_ids=[2])
    params.validate(V)
    SamplingParams().validate(V)
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(params), type=SamplingParams)
    assert decoded == params


def test_greedy_rows_take_the_argmax():
    logits = torch.stack([logits_row(s) for s in range(6)])
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(top_k=1),
        SamplingParams(temperature=1.0),  # sampled row in the same batch
        SamplingParams(temperature=0.0, top_p=0.5),
        SamplingParams(temperature=0.0),
        SamplingParams(top_k=1, temperature=5.0),
    ]
    ids = sample(logits, SamplingBatchInfo.build(params, V, "cpu"))
    for row in (0, 1, 3, 4, 5):
        assert ids[row] == logits[row].argmax()


@pytest.mark.parametrize(
    ("top_k", "top_p", "min_p"),
    [(5, 1.0, 0.0), (-1, 0.6, 0.0), (-1, 1.0, 0.3), (8, 0.9, 0.05), (3, 0.2, 0.0)],
)
def test_filters_never_sample_outside_the_allowed_set(top_k, top_p, min_p):
    for seed in range(3):
        logits = logits_row(seed)
        params = SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p, min_p=min_p)
        samples = draw(params, logits, seed=seed)
        probs = softmax64(logits)
        allowed = allowed_set(probs, top_k, top_p, min_p)
        assert set(samples.tolist()) <= allowed
        # Within the set, frequencies follow the renormalised distribution.
        target = np.zeros(V)
        target[list(allowed)] = probs[list(allowed)]
        target /= target.sum()
        freq = np.bincount(samples, minlength=V) / len(samples)
        assert np.abs(freq - target).max() < 0.035


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_scales_the_distribution(temperature):
    logits = logits_row(7, scale=1.0)
    samples = draw(SamplingParams(temperature=temperature), logits, seed=1)
    freq = np.bincount(samples, minlength=V) / len(samples)
    assert np.abs(freq - softmax64(logits, temperature)).max() < 0.035


def test_vocab_mask_constrains_sampled_and_greedy_rows():
    logits = logits_row(3)
    allowed = torch.zeros(V, dtype=torch.bool)
    allowed[[2, 9, 17, 30]] = True
    n = 500
    params = [SamplingParams(temperature=1.5)] * n + [SamplingParams(temperature=0.0)]
    info = SamplingBatchInfo.build(params, V, "cpu", masks=[allowed] * (n + 1))
    ids = sample(logits.expand(n + 1, V).clone(), info)
    assert set(ids.tolist()) <= {2, 9, 17, 30}
    assert ids[-1] == max((2, 9, 17, 30), key=lambda t: logits[t])
    # A request without a mask in the same batch is not constrained.
    info = SamplingBatchInfo.build(params[:2], V, "cpu", masks=[allowed, None])
    assert info.vocab_mask is not None and bool(info.vocab_mask[1].all())


def test_seeded_request_ignores_batch_composition():
    steps = [
        torch.stack([logits_row(100 + t), logits_row(200 + t), logits_row(300 + t)])
        for t in range(20)
    ]
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=77)

    def run(rows: list[int], params: list[SamplingParams]) -> list[int]:
        generators = None
        tokens = []
        for logits in steps:
            info = SamplingBatchInfo.build(params, V, "cpu", generators=generators)
            generators = info.generators
            tokens.append(int(sample(logits[rows], info)[0]))
        return tokens

    torch.manual_seed(0)
    alone = run([0], [seeded])
    torch.manual_seed(1)
    crowded = run(
        [0, 1, 2],
        [seeded, SamplingParams(temperature=0.7, top_k=4, seed=5), SamplingParams(min_p=0.1)],
    )
    assert alone == crowded
    assert len(set(alone)) > 1  # the generator advances between steps
    other_seed = SamplingParams(temperature=1.0, top_p=0.9, seed=78)
    assert run([0], [other_seed]) != alone


def test_logprobs_are_those_of_the_raw_logits():
    logits = torch.stack([logits_row(s) for s in range(3)])
    chosen = torch.tensor([4, 0, 39])
    out = compute_logprobs(logits, chosen, [0, 3, 5])
    for row in range(3):
        x = logits[row].double().numpy()
        logp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
        assert out.token_logprobs[row] == pytest.approx(logp[chosen[row]], abs=1e-5)
        n = [0, 3, 5][row]
        expected_ids = np.argsort(-logp)[:n].tolist()
        assert [t for _, t in out.top_logprobs[row]] == expected_ids
        assert [v for v, _ in out.top_logprobs[row]] == pytest.approx(logp[expected_ids], abs=1e-5)
