"""Penalties, logit bias, min new tokens and n through the HTTP server against transformers'
`generate` on the tiny Llama (fp32, greedy): the same tokens, and logprobs (of the adjusted
logits, SGLang's convention; transformers' processed scores) within 1e-3. transformers has no
frequency/presence processor: the reference applies OpenAI's formula itself on its logits.
A greedy divergence is excused only at a near-tie of the reference
(tests/support/hf_reference.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

from tests.support.hf_reference import assert_same_greedy, causal_lm
from vla_server.policies.registry import detect

NEW = 24
LOGPROB_TOL = 1e-3
PROMPT = [1, 40, 41, 42, 43, 40, 41, 42, 43, 50, 51]


class OpenAIPenalties:
    """OpenAI's frequency/presence penalties over the generated tokens (independent reference)."""

    def __init__(self, prompt_len: int, frequency: float, presence: float):
        self.prompt_len, self.frequency, self.presence = prompt_len, frequency, presence

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = input_ids[0, self.prompt_len :]
        counts = torch.bincount(out, minlength=scores.shape[-1]).to(scores.dtype)
        return scores - counts * self.frequency - (counts > 0).to(scores.dtype) * self.presence


@pytest.fixture(scope="module")
def hf(llama_path):
    return causal_lm(llama_path)


@pytest.fixture(scope="module")
def eos_ids(llama_path) -> list[int]:
    return list(detect(llama_path).decoder_config().eos_token_ids)


@pytest.fixture(scope="module")
def plain(hf) -> list[int]:
    """Plain greedy: each adjusted reference must differ from it, or the test proves nothing."""
    return hf_generate(hf, [])[0]


def hf_generate(model, processors: list, eos: list[int] | None = None):
    model.generation_config.eos_token_id = eos
    try:
        out = model.generate(
            torch.tensor([PROMPT]),
            max_new_tokens=NEW,
            do_sample=False,
            logits_processor=LogitsProcessorList(processors),
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=0,
            attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
        )
    finally:
        model.generation_config.eos_token_id = None
    scores = torch.stack(out.scores, dim=1)[0].float()
    return out.sequences[0, len(PROMPT) :].tolist(), scores


def served(server, sampling: dict) -> dict:
    body = {
        "input_ids": PROMPT,
        "return_logprob": True,
        "sampling_params": {"max_new_tokens": NEW, "temperature": 0, **sampling},
    }
    with server.client() as c:
        r = c.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def compare(out: dict, ref_tokens: list[int], scores: torch.Tensor, label: str) -> float:
    ours = out["output_ids"]
    assert len(ours) == len(ref_tokens), (ours, ref_tokens)
    steps = assert_same_greedy(ours, ref_tokens, scores, label)
    ref_lp = torch.log_softmax(scores, dim=-1)
    got = [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]][:steps]
    delta = max(
        (abs(g - float(ref_lp[i, t])) for i, (g, t) in enumerate(zip(got, ours, strict=False))),
        default=0.0,
    )
    print(f"{label}: {steps} greedy steps equal, max |dlogprob| {delta:.2e}")
    assert delta < LOGPROB_TOL
    return delta


@pytest.mark.parametrize("penalty", [1.3, 0.7])
def test_repetition_penalty(server, hf, plain, penalty):
    ref, scores = hf_generate(hf, [RepetitionPenaltyLogitsProcessor(penalty)])
    assert ref != plain
    out = served(server, {"repetition_penalty": penalty, "ignore_eos": True})
    compare(out, ref, scores, f"repetition_penalty={penalty}")


@pytest.mark.parametrize(("freq", "pres"), [(0.8, 0.0), (0.0, 1.5), (0.5, 0.5)])
def test_frequency_and_presence_penalties(server, hf, plain, freq, pres):
    ref, scores = hf_generate(hf, [OpenAIPenalties(len(PROMPT), freq, pres)])
    assert ref != plain
    params = {"frequency_penalty": freq, "presence_penalty": pres, "ignore_eos": True}
    compare(served(server, params), ref, scores, f"frequency={freq} presence={pres}")


def test_logit_bias(server, hf, plain):
    bias = {45: 4.0, 46: -100.0, 60: 2.5}
    ref, scores = hf_generate(hf, [SequenceBiasLogitsProcessor({(k,): v for k, v in bias.items()})])
    assert ref != plain
    params = {"logit_bias": {str(k): v for k, v in bias.items()}, "ignore_eos": True}
    compare(served(server, params), ref, scores, "logit_bias")


def test_min_new_tokens_holds_back_eos(server, hf, eos_ids):
    """EOS biased to win at once: it can come only after min_new_tokens, then ends the request."""
    min_new, eos = 6, eos_ids[0]
    processors = [
        MinNewTokensLengthLogitsProcessor(len(PROMPT), min_new, eos_ids),
        SequenceBiasLogitsProcessor({(eos,): 30.0}),
    ]
    ref, scores = hf_generate(hf, processors, eos=eos_ids)
    assert len(ref) == min_new + 1 and ref[-1] == eos
    out = served(server, {"min_new_tokens": min_new, "logit_bias": {str(eos): 30.0}})
    compare(out, ref, scores, "min_new_tokens")
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}


def test_n_samples(server, plain):
    """n greedy samples all equal transformers' greedy output; n seeded samples are
    reproducible and independent of each other."""
    outs = served(server, {"n": 3, "ignore_eos": True})
    assert [o["index"] for o in outs] == [0, 1, 2]
    assert all(o["output_ids"] == plain for o in outs)
    seeded = {"n": 3, "temperature": 1.0, "sampling_seed": 11, "ignore_eos": True}
    first = [o["output_ids"] for o in served(server, seeded)]
    again = [o["output_ids"] for o in served(server, seeded)]
    assert first == again
    assert len({tuple(s) for s in first}) > 1
