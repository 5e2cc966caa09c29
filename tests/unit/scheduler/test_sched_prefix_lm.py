"""Scheduling rules for prefix-LM models (PaliGemma/pi0-FAST) on the fake model: a cached prompt
is reused only by a request with the identical bidirectional prefix (an exact repeat is a full
hit; a prefix that differs in its last token shares nothing, although a causal model would share
all but that token), the prefix is computed in one prefill chunk even past the chunk budget,
and requests whose prefix-LM fields do not fit the model are refused."""

from __future__ import annotations

import pytest

from tests.support.sched_fakes import BOS, Harness

PROMPT = [BOS, *range(3, 33)]  # 31 tokens


def _run(h: Harness, rid: str, ids: list[int], **fields) -> None:
    h.submit(rid, ids, 6, **fields)
    h.run()


@pytest.mark.parametrize("tail", [0, 3])  # the whole prompt bidirectional, or a causal tail
def test_only_an_identical_prefix_is_reused(tail):
    h = Harness(prefix_lm=True)
    prefix = len(PROMPT) - tail
    _run(h, "a", PROMPT, prefix_lm_len=prefix)
    _run(h, "again", PROMPT, prefix_lm_len=prefix)
    assert h.out["again"].meta.cached_tokens == len(PROMPT) - 1
    assert h.out["again"].ids == h.out["a"].ids
    changed = [*PROMPT[: prefix - 1], 40, *PROMPT[prefix:]]
    _run(h, "changed", changed, prefix_lm_len=prefix)
    assert h.out["changed"].meta.cached_tokens == 0
    # Another prefix boundary or position convention over the same tokens is another prefix.
    _run(h, "shifted", PROMPT, prefix_lm_len=prefix, position_shift=1)
    assert h.out["shifted"].meta.cached_tokens == 0
    h.assert_clean()


def test_a_causal_model_shares_all_but_the_changed_token():
    h = Harness()
    _run(h, "a", PROMPT)
    _run(h, "changed", [*PROMPT[:-1], 40])
    assert h.out["changed"].meta.cached_tokens == len(PROMPT) - 1


def test_the_prefix_is_one_chunk_and_the_rest_is_chunked():
    h = Harness(prefix_lm=True, chunked_prefill_size=8)
    ids = [*PROMPT, *range(40, 60)]  # 51 tokens, the first 31 bidirectional
    h.submit("a", ids, 4, prefix_lm_len=len(PROMPT))
    h.submit("plain", [BOS, *range(3, 20)], 4, prefix_lm_len=18)
    h.run()
    chunks = [
        len(t)
        for b in h.runner.batches
        for r, t in zip(b.reqs, b.tokens, strict=True)
        if r.rid == "a"
    ]
    assert chunks[0] == len(PROMPT)  # past the budget of 8: the prefix's tokens see each other
    assert chunks[1:3] == [8, 8]  # the causal rest within the budget
    h.assert_clean()


@pytest.mark.parametrize(
    ("prefix_lm", "fields", "field"),
    [
        (False, {"prefix_lm_len": 5}, "prefix_lm_len"),
        (True, {}, "prefix_lm_len"),
        (True, {"prefix_lm_len": 40}, "prefix_lm_len"),
        (True, {"prefix_lm_len": 5, "session": {"id": "s"}}, "session_params"),
    ],
)
def test_fields_that_do_not_fit_the_model_are_refused(prefix_lm, fields, field):
    h = Harness(prefix_lm=prefix_lm)
    _run(h, "a", PROMPT, **fields)
    assert h.out["a"].finish["type"] == "abort" and h.out["a"].finish["field"] == field
    h.assert_clean()
