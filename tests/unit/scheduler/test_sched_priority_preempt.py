"""Priorities on the scheduling core: queue order (priority, then arrival), preemption by
retraction within one step only for a gap above the threshold (and never when disabled), the
order flipped by `schedule_low_priority_values_first`, the queue bound by priority, and KV
pressure retracting the lowest priority first. Retracted requests end with the output they
have alone."""

from __future__ import annotations

import pytest

from tests.support.sched_fakes import Harness, reference

LOW_NEW = 60
LOWS = {f"low-{i}": [20 + i, 31, 47, 52 + i, 60] for i in range(4)}
HIGH = [50, 51, 52, 7, 9]


def prio_harness(**cfg) -> Harness:
    return Harness(enable_priority_scheduling=True, max_running_requests=4, **cfg)


def saturate(h: Harness, priority: int, news: list[int] | None = None) -> None:
    """Every slot busy with a low request; they all run after one step."""
    for (rid, ids), n in zip(LOWS.items(), news or [LOW_NEW] * 4, strict=True):
        h.submit(rid, ids, n, priority=priority, stream=True)
    h.step()
    assert h.running() == list(LOWS)


def first(h: Harness, rid: str) -> int:
    return h.out.events.index((rid, "first"))


def end(h: Harness, rid: str) -> int:
    return h.out.events.index((rid, "end"))


def assert_lows_as_alone(h: Harness) -> None:
    for rid, ids in LOWS.items():
        assert h.out[rid].ids == reference(ids, LOW_NEW), rid
        assert h.out[rid].finish_type == "length"


@pytest.mark.parametrize(
    ("low_first", "low", "high"), [(False, 0, 100), (True, 50, 0)], ids=["high", "low-values"]
)
def test_preempt_a_more_important_request_runs_within_one_step(low_first, low, high):
    h = prio_harness(schedule_low_priority_values_first=low_first)
    saturate(h, low)
    h.step(5)
    h.submit("high", HIGH, 16, priority=high, stream=True)
    h.step()
    # the newest of the least important is retracted; the high one runs at once
    assert h.running() == ["low-0", "low-1", "low-2", "high"]
    assert h.waiting() == ["low-3"]
    h.run()
    h.assert_clean()
    assert h.out["high"].queue_steps == 0
    assert h.out["high"].ids == reference(HIGH, 16)
    assert_lows_as_alone(h)
    assert [h.out[rid].meta.num_retractions for rid in LOWS] == [0, 0, 0, 1]
    assert h.core.stats().num_retractions == 1


def test_preempt_gap_within_threshold_does_not_preempt_but_jumps_the_queue():
    """Priority 10 over 0 is not above the default threshold 10: it waits for a free slot, yet
    takes it before an earlier priority-0 request."""
    h = prio_harness()
    saturate(h, 0, [30] + [LOW_NEW] * 3)
    h.submit("queued-low", [70, 71, 72], 8, priority=0, stream=True)
    h.step()
    h.submit("mid", HIGH, 20, priority=10, stream=True)
    h.step()
    assert h.waiting() == ["queued-low", "mid"]
    h.run()
    h.assert_clean()
    assert h.core.stats().num_retractions == 0
    assert end(h, "low-0") < first(h, "mid") < first(h, "queued-low")
    assert h.out["mid"].queue_steps > 1
    assert h.out["mid"].ids == reference(HIGH, 20)


@pytest.mark.parametrize(
    ("threshold", "gap", "preempts"), [(10, 11, True), (10, 10, False), (0, 1, True)]
)
def test_preempt_needs_a_gap_above_the_threshold(threshold, gap, preempts):
    h = prio_harness(priority_scheduling_preemption_threshold=threshold)
    saturate(h, 0)
    h.submit("high", HIGH, 4, priority=gap)
    h.step()
    assert ("high" in h.running()) is preempts
    h.run()
    assert h.core.stats().num_retractions == int(preempts)
    assert_lows_as_alone(h)


def test_preempt_disabled_never_retracts_but_the_order_holds():
    h = prio_harness(disable_priority_preemption=True)
    saturate(h, 0, [30] + [LOW_NEW] * 3)
    h.submit("queued-low", [70, 71, 72], 8, stream=True)
    h.submit("high", HIGH, 8, priority=100, stream=True)
    h.step(3)
    assert h.waiting() == ["queued-low", "high"]
    h.run()
    assert h.core.stats().num_retractions == 0
    assert end(h, "low-0") < first(h, "high") < first(h, "queued-low")


@pytest.mark.parametrize("low_first", [False, True])
def test_sched_queue_order_is_priority_then_arrival(low_first):
    """One slot; the gaps stay within the threshold, so the order is the queue's alone."""
    h = Harness(
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=low_first,
        max_running_requests=1,
    )
    h.submit("busy", [5, 6], 10)
    h.step()
    for rid, prio in (("a", 0), ("b", 5), ("c", 5), ("d", 0), ("e", 3)):
        h.submit(rid, [ord(rid), 7], 3, priority=prio, stream=True)
    h.run()
    order = [rid for rid, kind in h.out.events if kind == "first" and rid != "busy"]
    assert order == (["a", "d", "e", "b", "c"] if low_first else ["b", "c", "e", "a", "d"])


def test_sched_max_queued_requests_rejects_by_priority():
    """Queue bound 4, smaller values first: a worse or equal newcomer gets a 503 (the queued
    request stays); a better one evicts the worst queued request, which ends with a 503."""
    h = prio_harness(schedule_low_priority_values_first=True, max_queued_requests=4)
    saturate(h, 50)
    for p in (45, 46, 47, 48):  # gaps within the threshold: they wait instead of preempting
        h.submit(f"queued-{p}", [30, p], 8, priority=p)
    h.step()
    assert len(h.waiting()) == 4
    for p in (49, 48):
        h.submit(f"new-{p}", [31, p], 8, priority=p)
        reason = h.out[f"new-{p}"].finish
        assert reason["status_code"] == 503 and "queue is full" in reason["message"]
    h.submit("new-42", [31, 42], 8, priority=42)
    evicted = h.out["queued-48"].finish
    assert evicted["status_code"] == 503 and "higher priority" in evicted["message"]
    assert h.waiting() == ["queued-45", "queued-46", "queued-47", "new-42"]
    h.run()
    h.assert_clean()
    for rid in ("queued-45", "queued-46", "queued-47", "new-42", *LOWS):
        assert h.out[rid].finish_type == "length", rid


def test_sched_queue_bound_without_priorities_refuses_every_newcomer():
    h = Harness(max_running_requests=1, max_queued_requests=1)
    h.submit("busy", [5, 6], 10)
    h.step()
    h.submit("queued", [7], 4)
    h.submit("refused", [8], 4, priority=100)
    assert h.out["refused"].finish["status_code"] == 503
    h.run()
    assert h.out["queued"].finish_type == "length"


KV_PROMPTS = {f"kv-{i}": [40 + i, 7, 8, 9, 10, 11, 12, 13, 14, 15] for i in range(8)}


def kv_pressure(reserve: float, overlap: bool = True) -> tuple[Harness, float]:
    """Eight requests of 70 tokens on a pool of 300, priorities 0 and 5 alternating (within
    the preemption threshold: only KV pressure retracts); also the highest reserve ratio seen."""
    h = Harness(
        enable_priority_scheduling=True,
        pool=300,
        decode_reserve_ratio=reserve,
        chunked_prefill_size=32,
        disable_overlap_schedule=not overlap,
    )
    for i, (rid, ids) in enumerate(KV_PROMPTS.items()):
        h.submit(rid, ids, 60, priority=5 * (i % 2))
    peak = reserve
    for _ in range(10_000):
        if h.core.is_idle():
            break
        h.step()
        peak = max(peak, h.core.state.reserve_ratio)
    h.assert_clean()
    for rid, ids in KV_PROMPTS.items():
        assert h.out[rid].ids == reference(ids, 60), rid
    return h, peak


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "plain"])
def test_preempt_kv_pressure_retracts_the_lowest_priority_first(overlap):
    h, peak = kv_pressure(0.05, overlap)
    retracted = {rid for rid in KV_PROMPTS if h.out[rid].meta.num_retractions}
    assert retracted, "the pool was meant to run short"
    assert retracted <= {f"kv-{i}" for i in range(0, 8, 2)}, "only priority 0 is retracted"
    assert peak >= 0.05 + 0.2, "after a retraction admission reserves more for a while"
    assert h.core.stats().num_retractions == sum(
        h.out[rid].meta.num_retractions for rid in KV_PROMPTS
    )


def test_preempt_full_reserve_admits_only_what_fits_and_never_retracts():
    h, _ = kv_pressure(1.0)
    assert h.core.stats().num_retractions == 0
    assert max(len(b.reqs) for b in h.runner.batches) == 4  # 4 x 70 <= 300 < 5 x 70


@pytest.mark.parametrize("priorities", [False, True])
def test_sched_a_request_that_does_not_fit_holds_back_those_behind_it(priorities):
    """Strict queue order: the head of the queue waits for KV (it may not preempt: the gap is
    within the threshold), and a request behind it that would fit does not jump ahead."""
    h = Harness(pool=200, enable_priority_scheduling=priorities)
    h.submit("running", [5] * 10, 100, stream=True)
    h.step()
    h.submit("head", [6] * 10, 100, priority=5, stream=True)  # 110 > 200 - 110 reserved
    h.submit("small", [7] * 5, 10, stream=True)  # 15 would fit
    h.step(3)
    assert h.waiting() == ["head", "small"]
    h.run()
    h.assert_clean()
    assert end(h, "running") < first(h, "head") and end(h, "running") < first(h, "small")
    assert h.out["small"].ids == reference([7] * 5, 10)
