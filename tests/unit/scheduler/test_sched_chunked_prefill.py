"""Chunked prefill on the scheduling core: a long new prompt is prefilled in chunks of the budget
while every running decode still gets a token each step (mixed batches), several prompts share
one step's budget, and outputs do not depend on the chunk size."""

from __future__ import annotations

import math

import pytest

from tests.support.sched_fakes import Harness, reference
from vla_server.scheduler.schedule_batch import ScheduledBatch

CHUNK = 16
LONG = [3 + i % 50 for i in range(400)]
STREAM = [6, 7, 8, 9]


def test_sched_running_stream_advances_while_a_long_prompt_is_prefilled():
    h = Harness(chunked_prefill_size=CHUNK)
    h.submit("stream", STREAM, 100, stream=True)
    h.step(3)
    h.submit("long", LONG, 2, stream=True)
    before = len(h.runner.batches)
    h.run_until(lambda: h.out.ended("long"), "the long prompt done")
    prefill = [b for b in h.runner.batches[before:] if any(r.rid == "long" for r in b.reqs)]
    chunks = math.ceil(len(LONG) / CHUNK)
    for b in prefill[:chunks]:
        sizes = {r.rid: len(t) for r, t in zip(b.reqs, b.tokens, strict=True)}
        assert sizes == {"stream": 1, "long": CHUNK}
    got = h.out.events.index(("long", "first"))
    stream_tokens = sum(1 for b in h.runner.batches[before:] if b.sample[0]) - 1
    assert stream_tokens >= chunks
    assert ("stream", "end") not in h.out.events[:got]
    h.run()
    assert h.out["stream"].ids == reference(STREAM, 100)
    assert h.out["long"].ids == reference(LONG, 2)


def test_sched_prefills_share_one_steps_budget():
    h = Harness(chunked_prefill_size=CHUNK)
    h.submit("a", LONG[:40], 2)
    h.submit("b", LONG[10:50], 2)
    h.run()
    assert [prompt_tokens(b) for b in h.runner.batches[:5]] == [CHUNK] * 5
    assert sum(len(t) for b in h.runner.batches for t in b.tokens) == 80 + 2
    assert h.out["a"].ids == reference(LONG[:40], 2)
    assert h.out["b"].ids == reference(LONG[10:50], 2)


@pytest.mark.parametrize("chunk", [0, 7, 64])
def test_sched_outputs_do_not_depend_on_the_chunk_size(chunk):
    h = Harness(chunked_prefill_size=chunk)
    prompts = {"long": LONG[:150], "mid": LONG[:60], "short": STREAM}
    for rid, ids in prompts.items():
        h.submit(rid, ids, 20)
    h.run()
    h.assert_clean()
    for rid, ids in prompts.items():
        assert h.out[rid].ids == reference(ids, 20)
    largest = max(prompt_tokens(b) for b in h.runner.batches)
    assert largest == (sum(map(len, prompts.values())) if chunk == 0 else chunk)


def prompt_tokens(batch: ScheduledBatch) -> int:
    """Prompt tokens (not decode tokens) computed by a batch."""
    return sum(
        max(min(lo + len(t), len(r.origin_input_ids)) - lo, 0)
        for r, lo, t in zip(batch.reqs, batch.prefix_lens, batch.tokens, strict=True)
    )
