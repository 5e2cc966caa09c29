"""Control requests on the scheduling core: pause modes (`retract` hands the running requests'
KV back and re-queues them so the cache can be flushed; `in_place` keeps them resident and
flush and weight updates are refused with a reason; `abort` ends them), continue, flush, weight
updates (which flush the cache), and a failing call answering instead of raising."""

from __future__ import annotations

import pytest

from tests.support.sched_fakes import Harness, reference, salt_of
from vla_server.io_struct import (
    ContinueGenerationReq,
    FlushCacheReq,
    GetInternalStateReq,
    PauseGenerationReq,
    UpdateWeightsFromDiskReq,
)

NEW = 100
PROMPTS = {f"p{i}": [30 + i, 41, 52, 63 + i] for i in range(3)}


def streams(h: Harness) -> None:
    """The prompts streamed side by side, each with 5 tokens out when this returns."""
    for rid, ids in PROMPTS.items():
        h.submit(rid, ids, NEW, stream=True)
    h.step(6)
    assert all(len(h.out[rid].ids) >= 5 for rid in PROMPTS)


def state(h: Harness) -> dict:
    return h.control(GetInternalStateReq).data


def frozen(h: Harness) -> None:
    """Steps while paused run nothing."""
    launched, got = len(h.runner.batches), {rid: len(h.out[rid].ids) for rid in PROMPTS}
    h.step(5)
    assert len(h.runner.batches) == launched
    assert {rid: len(h.out[rid].ids) for rid in PROMPTS} == got


def resume_and_finish(h: Harness, retractions: int) -> None:
    assert h.control(ContinueGenerationReq).success
    h.run()
    h.assert_clean()
    for rid, ids in PROMPTS.items():
        assert h.out[rid].ids == reference(ids, NEW), rid
        assert h.out[rid].finish_type == "length"
        assert h.out[rid].meta.num_retractions == retractions


def test_sched_pause_retract_frees_the_kv_and_the_cache_can_be_flushed():
    h = Harness()
    streams(h)
    reply = h.control(PauseGenerationReq, mode="retract")
    assert reply.success and reply.message == "paused (retract)"
    st = state(h)
    assert st["paused"] and st["num_running_reqs"] == 0
    assert st["num_waiting_reqs"] == len(PROMPTS) and st["num_retractions"] == len(PROMPTS)
    assert st["kv_pool"]["used"] == 0
    assert h.control(FlushCacheReq).success
    pool = state(h)["kv_pool"]
    assert pool["cached"] == 0 and pool["free"] == pool["total"]
    frozen(h)
    resume_and_finish(h, retractions=1)


def test_sched_pause_in_place_keeps_requests_resident_and_refuses_flush_and_weight_update():
    h = Harness()
    streams(h)
    assert h.control(PauseGenerationReq, mode="in_place").success
    st = state(h)
    assert st["paused"] and st["num_running_reqs"] == len(PROMPTS)
    assert st["kv_pool"]["used"] > 0
    flush = h.control(FlushCacheReq)
    assert not flush.success and "running" in flush.message
    update = h.control(UpdateWeightsFromDiskReq, model_path="/other")
    assert not update.success
    assert update.message.startswith("cannot update weights") and "running" in update.message
    assert h.model.salt == 0, "the refused update left the weights alone"
    frozen(h)
    resume_and_finish(h, retractions=0)


def test_sched_pause_abort_ends_every_request_and_holds_new_ones():
    h = Harness(max_running_requests=len(PROMPTS))
    streams(h)
    h.submit("queued", [9, 8], 4)
    h.step()
    assert h.waiting() == ["queued"]
    assert h.control(PauseGenerationReq, mode="abort").success
    h.step()
    assert all(h.out[rid].finish_type == "abort" for rid in [*PROMPTS, "queued"])
    assert state(h)["kv_pool"]["used"] == 0
    h.submit("later", [9, 9], 4)
    h.step(3)
    assert h.waiting() == ["later"]
    h.control(ContinueGenerationReq)
    h.run()
    h.assert_clean()
    assert h.out["later"].ids == reference([9, 9], 4)


def test_sched_flush_is_refused_while_requests_wait_unless_paused():
    h = Harness()
    h.submit("r", [5, 6, 7], 4)
    flush = h.control(FlushCacheReq)
    assert not flush.success and "waiting; pause generation first" in flush.message
    h.control(PauseGenerationReq, mode="in_place")
    assert h.control(FlushCacheReq).success
    h.control(ContinueGenerationReq)
    h.run()
    assert h.out["r"].ids == reference([5, 6, 7], 4)


def test_sched_weight_update_flushes_the_cache():
    h = Harness()
    prompt = PROMPTS["p0"]
    h.submit("warm", prompt, 16)
    h.run()
    assert state(h)["kv_pool"]["cached"] > 0
    reply = h.control(UpdateWeightsFromDiskReq, model_path="/other")
    assert reply.success and reply.data == {"weight_version": 1}
    pool = state(h)["kv_pool"]
    assert pool["cached"] == 0 and pool["used"] == 0
    h.submit("after", prompt, 16)
    h.run()
    assert h.out["after"].meta.cached_tokens == 0, "no K/V of the old weights is reused"
    assert h.out["warm"].ids == reference(prompt, 16)
    assert h.out["after"].ids == reference(prompt, 16, salt=salt_of("/other"))
    assert h.out["after"].ids != h.out["warm"].ids


def test_sched_a_failing_control_call_answers(monkeypatch: pytest.MonkeyPatch):
    h = Harness()

    def broken(parts) -> None:
        raise ValueError(f"{parts.folder} has a different architecture")

    monkeypatch.setattr(h.model, "update_weights", broken)
    reply = h.control(UpdateWeightsFromDiskReq, model_path="/bad")
    assert not reply.success
    assert reply.message == "ValueError: /bad has a different architecture"
    assert state(h)["weight_version"] == 0
