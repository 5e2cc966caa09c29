"""The scheduling core on the fake model: outputs identical to each prompt run alone whatever the
loop (overlap or plain, inline or on the worker thread), chunk size or radix setting; exact ends
at EOS, stop ids, stop strings and max_new_tokens; aborts; refusals; prefix reuse; action
masks; prompt logprobs."""

from __future__ import annotations

import pytest
import torch

from tests.support.sched_fakes import EOS, VOCAB, Harness, greedy, reference
from vla_server.model.sampling import SamplingParams
from vla_server.policies.base import Tokens

BASE = list(range(10, 60))
PROMPTS = {
    "one": BASE[:1],
    "short": BASE[:7],
    "mid": BASE[:30],
    "long": BASE + BASE[:40],
    "branch": BASE[:20] + [3, 4],
    "other": [40 + i % 9 for i in range(60)],
}
NEW = 12

MODES = {
    "overlap": {},
    "plain": {"disable_overlap_schedule": True},
    "worker-thread": {"threaded": True},
    "plain-worker-thread": {"threaded": True, "disable_overlap_schedule": True},
    "chunk7": {"chunked_prefill_size": 7},
    "no-radix": {"disable_radix_cache": True},
    "two-slots": {"max_running_requests": 2},
}


def run_waves(h: Harness, sampling: SamplingParams | None = None) -> dict[str, list[int]]:
    """Every prompt twice: together, then again once the first wave is done (prefix hits)."""
    for wave in range(2):
        for name, ids in PROMPTS.items():
            h.submit(f"{name}-{wave}", ids, NEW, sampling=sampling)
        h.run()
    h.assert_clean()
    return {rid: res.ids for rid, res in h.out.results.items()}


@pytest.mark.parametrize("mode", MODES)
def test_sched_outputs_equal_each_prompt_alone(mode):
    h = Harness(**MODES[mode])
    outs = run_waves(h)
    h.close()
    for rid, ids in outs.items():
        assert ids == reference(PROMPTS[rid.rsplit("-", 1)[0]], NEW), rid
    second = [h.out[f"{name}-1"].meta.cached_tokens for name in PROMPTS]
    if mode == "no-radix":
        assert second == [0] * len(PROMPTS)
    else:
        # the whole prompt but its last token comes from the first wave's KV
        assert second == [len(ids) - 1 for ids in PROMPTS.values()]


def test_sched_seeded_sampling_is_the_same_in_every_loop():
    sampling = SamplingParams(max_new_tokens=NEW, temperature=1.0, seed=7, ignore_eos=True)
    outs = {mode: run_waves(Harness(**MODES[mode]), sampling) for mode in ("overlap", "plain")}
    assert outs["overlap"] == outs["plain"]
    # a seed is per request: both waves draw the same stream for the same prompt
    assert all(outs["plain"][f"{n}-0"] == outs["plain"][f"{n}-1"] for n in PROMPTS)
    assert outs["plain"]["long-0"] != reference(PROMPTS["long"], NEW), "sampled, not greedy"


def first_index(out: list[int], pred) -> int:
    return next(i for i, t in enumerate(out) if pred(t, out[:i]))


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "plain"])
def test_sched_stop_ids_eos_and_max_new_tokens_end_exactly(overlap):
    """The overlap loop decides a finish a step late; it must never emit a token past it."""
    h = Harness(disable_overlap_schedule=not overlap)
    want = {}
    for k, (name, ids) in enumerate(PROMPTS.items()):
        full = reference(ids, 40)
        stop = full[2 + k % 5]
        h.submit(f"{name}-stop", ids, sampling=greedy(40, stop_token_ids=[stop]))
        want[f"{name}-stop"] = (full[: full.index(stop) + 1], {"type": "stop", "matched": stop})
        h.submit(f"{name}-len", ids, 1 + k % 3)
        want[f"{name}-len"] = (full[: 1 + k % 3], {"type": "length", "length": 1 + k % 3})
    eos_prompt = next([7, p] for p in range(VOCAB) if EOS in reference([7, p], 30)[2:])
    full = reference(eos_prompt, 30)
    h.submit("eos", eos_prompt, sampling=SamplingParams(max_new_tokens=30, temperature=0))
    want["eos"] = (full[: full.index(EOS) + 1], {"type": "stop", "matched": EOS})
    h.submit("eos-ignored", eos_prompt, 30)
    want["eos-ignored"] = (full, {"type": "length", "length": 30})
    h.run()
    h.assert_clean()
    assert {rid: (r.ids, r.finish) for rid, r in h.out.results.items()} == want


def test_sched_stop_strings_end_the_request():
    h = Harness()
    full = reference(PROMPTS["mid"], 30)
    stop = f"<{full[4]}>"  # the fake tokenizer decodes token v to '<v>'
    h.submit("s", PROMPTS["mid"], sampling=greedy(30, stop=[stop]))
    h.run()
    assert h.out["s"].ids == full[: full.index(full[4]) + 1]
    assert h.out["s"].finish == {"type": "stop", "matched": stop}


def test_sched_abort_of_waiting_and_running_requests():
    h = Harness(max_running_requests=1)
    h.submit("running", PROMPTS["mid"], 100, stream=True)
    h.submit("waiting", PROMPTS["short"], 8)
    h.step(3)
    assert h.running() == ["running"] and h.waiting() == ["waiting"]
    h.abort("waiting")
    # a waiting request ends at once, without a token
    assert h.out["waiting"].finish["type"] == "abort" and h.out["waiting"].ids == []
    assert h.out["waiting"].queue_steps is None
    got = len(h.out["running"].ids)
    h.abort("running")
    h.step()  # a running one ends at the next step, its KV released
    res = h.out["running"]
    assert res.finish == {"type": "abort", "message": "aborted", "status_code": 499}
    assert 0 < len(res.ids) <= got + 1
    assert res.ids == reference(PROMPTS["mid"], len(res.ids))
    h.run()
    h.assert_clean()


def test_sched_abort_all():
    h = Harness(max_running_requests=2)
    for name in ("short", "mid", "long"):
        h.submit(name, PROMPTS[name], 50)
    h.step(2)
    h.abort(abort_all=True)
    h.run()
    h.assert_clean()
    assert {r.finish_type for r in h.out.results.values()} == {"abort"}
    assert h.out["long"].ids == []


def test_sched_refuses_what_can_never_run():
    h = Harness(pool=100, context_len=64)
    h.submit("empty", [], 4)
    h.submit("too-long", list(range(6, 70)), 4)
    h.submit("too-big", list(range(6, 50)), 57)  # 44 + min(57, 64 - 44) = 64 KV tokens
    h.submit("actions", [5, 6], 4, num_actions=2)
    h.run()
    assert h.out["empty"].finish["message"] == "prompt has 0 tokens; the context length is 64"
    assert h.out["too-long"].finish["message"] == "prompt has 64 tokens; the context length is 64"
    assert h.out["too-big"].finish_type == "length", "max_new_tokens is cut to the context"
    assert h.out["too-big"].ids == reference(list(range(6, 50)), 20)
    assert h.out["actions"].finish["message"] == "this model has no action head"
    small = Harness(pool=30, context_len=64)
    small.submit("pool", list(range(6, 20)), 17)
    small.submit("fits", list(range(6, 20)), 16)
    small.run()
    reason = small.out["pool"].finish
    assert reason["status_code"] == 400 and "--max-total-tokens" in reason["message"]
    assert "needs 31 KV tokens (prompt 14 + max_new_tokens 17)" in reason["message"]
    assert small.out["fits"].ids == reference(list(range(6, 20)), 16)
    small.assert_clean()


def test_sched_radix_cache_reuses_a_finished_requests_prefix():
    h = Harness()
    h.submit("a", PROMPTS["long"], 5)
    h.run()
    h.submit("b", PROMPTS["long"][:70] + [5, 5], 5)
    h.submit("c", PROMPTS["long"] + h.out["a"].ids + [9], 5)
    h.run()
    assert h.out["b"].meta.cached_tokens == 70
    # a's output was cached too, except its last token, never fed back
    assert h.out["c"].meta.cached_tokens == len(PROMPTS["long"]) + 4
    assert h.out["c"].ids == reference(PROMPTS["long"] + h.out["a"].ids + [9], 5)
    tree = h.kv.tree.stats
    assert tree.hit_tokens == 70 + len(PROMPTS["long"]) + 4
    h.assert_clean()


def test_sched_action_requests_sample_only_action_tokens():
    mask = torch.zeros(VOCAB, dtype=torch.bool)
    mask[VOCAB - 8 :] = True
    h = Harness(head=Tokens(mask))
    h.submit("act", PROMPTS["mid"], 14, num_actions=2)
    h.submit("text", PROMPTS["mid"], 14)
    h.run()
    assert h.out["act"].ids == reference(PROMPTS["mid"], 14, mask=mask)
    assert all(t >= VOCAB - 8 for t in h.out["act"].ids)
    assert h.out["text"].ids == reference(PROMPTS["mid"], 14)
    assert h.out["act"].ids != h.out["text"].ids


@pytest.mark.parametrize("start", [1, 4, 9])
def test_sched_prompt_logprobs_from_logprob_start_len_limit_the_prefix_reuse(start):
    h = Harness()
    prompt = PROMPTS["mid"][:12]
    for rid in ("first", "again"):
        h.submit(rid, prompt, 2, return_logprob=True, logprob_start_len=start)
        h.run()
        assert h.out[rid].input_logprob_ids == prompt[start:]
    # cached positions have no logits: only the unscored prefix may come from the cache
    assert h.out["again"].meta.cached_tokens == max(start - 1, 0)


def test_sched_streams_every_interval_and_non_streams_at_the_end():
    h = Harness(stream_interval=3)
    h.submit("stream", PROMPTS["short"], 10, stream=True)
    h.submit("whole", PROMPTS["short"], 10)
    h.run()
    # first token at once, then every 3 tokens: 1, 4, 7, 10
    assert h.out["stream"].chunks == 4
    assert h.out["whole"].chunks == 1
    assert h.out["stream"].ids == h.out["whole"].ids == reference(PROMPTS["short"], 10)
