"""Priority isolation's background lane (`--realtime-background-lane`): what the gate leaves out
of a protected step runs in a second lane meanwhile, one step at a time, built as a step without
isolation would be; nothing is forced into a protected step.

The fake model's step time is 10 ms plus 2 ms per token (CPU-like: every row costs). The lane
runs inline (its step is done when the scheduler next looks) and the fake clock moves on by the
main lane's step times only, as the two lanes run side by side."""

from __future__ import annotations

import os

import torch

from tests.support.sched_fakes import Harness, reference, sched_config
from tests.unit.scheduler.test_sched_isolation import (
    CPU_TOKEN_S,
    HIGH,
    HOLD_MS,
    LOW_NEW,
    LOWS,
    assert_all_as_alone,
    start_lows,
    steps_of,
)
from vla_server.io_struct import GetInternalStateReq
from vla_server.scheduler.factory import background_lane
from vla_server.scheduler.isolation import FIRST_FRAMES_KEEP_S, LANE_MIN_STEP_S


def lane_harness(token_s: float = CPU_TOKEN_S, **cfg) -> Harness:
    return Harness(
        enable_priority_scheduling=True,
        max_running_requests=8,
        max_hold_ms=HOLD_MS,
        token_s=token_s,
        background=True,
        **({"realtime_priority": 100, "realtime_background_lane": "on"} | cfg),
    )


def lane_steps(h: Harness, rid: str) -> list[int]:
    return [
        i for i, b in enumerate(h.runner.background_batches) if any(r.rid == rid for r in b.reqs)
    ]


def test_held_requests_run_in_the_background_lane_never_in_a_protected_step():
    h = lane_harness()
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    h.run()
    high = steps_of(h, "high")
    for i in high[1:]:  # the first was built before the model had measured a step alone
        assert [r.rid for r in h.runner.batches[i].reqs] == ["high"], i
    for rid in LOWS:
        assert lane_steps(h, rid), rid
    # Each background step is built as a step without isolation: prefill within the chunk
    # budget, and never a protected request.
    budget = h.cfg.chunked_prefill_size
    for batch in h.runner.background_batches:
        assert sum(len(t) for t in batch.tokens if len(t) > 1) <= budget
        assert not any(r.priority == 100 for r in batch.reqs)
    state = h.control(GetInternalStateReq).data
    assert state["background_steps"] == len(h.runner.background_batches) > 0
    assert_all_as_alone(h, {"high": HIGH}, 16)


def test_a_request_is_in_one_lane_at_a_time():
    """No request is in a main-lane batch while its background batch is unapplied, and each
    request's tokens come out in order (the outputs equal each request's alone)."""
    h = lane_harness()
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    seen_in_both = []
    while not h.core.is_idle():
        h.step()
        bg = h.core.state.background
        if bg is not None and h.core.state.inflight is not None:
            seen_in_both += set(bg[0].reqs) & set(h.core.state.inflight[0].reqs)
    assert seen_in_both == []
    assert_all_as_alone(h, {"high": HIGH}, 16)


def test_without_a_protected_request_the_lane_stays_idle():
    h = lane_harness()
    start_lows(h, 0)
    h.run()
    assert h.runner.background_batches == []
    assert h.core.state.background_steps == 0
    for rid, ids in LOWS.items():
        assert h.out[rid].ids == reference(ids, LOW_NEW)


def test_the_gap_counter_bounds_each_less_important_request_between_its_steps():
    """The node's own counter of the longest gap between a less important request's steps
    (max_unprotected_gap_ms) is what the fake clock shows, and it stays below the hold."""
    h = lane_harness()
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    h.run()
    state = h.control(GetInternalStateReq).data
    assert 0 < state["max_unprotected_gap_ms"] <= HOLD_MS + state["max_step_ms"]
    assert state["max_step_ms"] > 0


def test_auto_uses_the_lane_only_for_steps_long_enough_to_be_compute():
    """In auto mode a one-token step shorter than LANE_MIN_STEP_S keeps the max-hold rule (the
    fake's 10 ms step is above it; a 1 ms one below)."""
    slow = lane_harness(realtime_background_lane="auto")
    fast = lane_harness(realtime_background_lane="auto")
    fast.runner.step_s, fast.runner.token_s = 0.001, 0.0002
    assert fast.runner.cost_of_one() < LANE_MIN_STEP_S <= slow.runner.cost_of_one()
    for h in (slow, fast):
        start_lows(h, 0)
        h.submit("high", HIGH, 16, priority=100, stream=True)
        h.run()
        assert_all_as_alone(h, {"high": HIGH}, 16)
    assert slow.core.state.background_steps > 0
    assert fast.core.state.background_steps == 0 and fast.core.state.held_steps > 0


def test_the_node_has_a_lane_with_isolation_on_a_cpu_with_a_core_to_spare(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")

    def lane(device: torch.device, **cfg) -> bool:
        executor = background_lane(sched_config(**({"realtime_priority": 10} | cfg)), device)
        if executor is not None:
            executor.shutdown()
        return executor is not None

    assert lane(cpu) and not lane(gpu)
    assert lane(gpu, realtime_background_lane="on")
    assert not lane(cpu, realtime_background_lane="off")
    assert not lane(cpu, realtime_priority=None)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert not lane(cpu)


def test_the_lane_runs_without_overlap_too():
    h = lane_harness(disable_overlap_schedule=True)
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    h.run()
    assert h.core.state.background_steps > 0
    assert_all_as_alone(h, {"high": HIGH}, 16)


def test_the_lane_waits_for_the_requests_a_main_lane_batch_holds():
    """A low that a main-lane batch in flight still holds (it ran there before the protected
    request came) would miss a lane step started now, then wait for that step and its own; so
    the lane's next step waits for it (one main-lane step at most). The inline lane here never
    runs beside a main-lane step, so the batch in flight is set up by hand."""
    h = lane_harness()
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    h.step(2)
    h.core._collect_background(wait=False)
    s = h.core.state
    assert s.background is None and h.core.builder.gated
    low = next(r for r in s.running if r.rid in LOWS)
    low.inflight += 1  # as a main-lane batch in flight holds it
    h.core._launch_background()
    assert s.background is None
    low.inflight -= 1  # that batch applied
    h.core._launch_background()
    assert s.background is not None and low in s.background[0].reqs
    h.run()
    assert_all_as_alone(h, {"high": HIGH}, 16)


KEPT_NEW = 200  # the lows' new tokens: more than the lane makes in the keep window


def lows_after_a_first_frame(reserve_ms: float) -> tuple[Harness, list[bool]]:
    """A protected frame answered, then the lows arrive; for each main-lane batch built within
    FIRST_FRAMES_KEEP_S of the frame, whether it holds a low."""
    h = lane_harness(realtime_reserve_ms=reserve_ms)
    h.submit("high", HIGH, 2, priority=100, stream=True)
    sent = h.clock.now
    h.run_until(lambda: h.out.ended("high"), "the frame answered")
    for rid, ids in LOWS.items():
        h.submit(rid, ids, KEPT_NEW, priority=0, stream=True)
    ran = len(h.runner.batches)
    h.run_until(lambda: h.clock.now > sent + FIRST_FRAMES_KEEP_S, "the keep window over")
    built = zip(h.runner.batches[ran:], h.batch_times[ran:], strict=True)
    holds = [
        any(r.rid in LOWS for r in b.reqs) for b, t in built if t <= sent + FIRST_FRAMES_KEEP_S
    ]
    return h, holds


def test_before_the_rhythm_is_known_the_main_lane_stays_clear_after_a_frame():
    """A loop's first frames give no rhythm to reserve by; with the lane the main lane still
    keeps clear of others for FIRST_FRAMES_KEEP_S after each (they run in the lane), and takes
    them again once the robot has gone quiet for longer. Without reserving it does not."""
    _, unreserved = lows_after_a_first_frame(0.0)
    assert any(unreserved)
    h, holds = lows_after_a_first_frame(10.0)
    assert not any(holds)
    assert all(lane_steps(h, rid) for rid in LOWS)  # they ran in the lane meanwhile
    assert sorted(h.running()) == sorted(LOWS)
    later = len(h.runner.batches)
    h.step(5)
    assert any(r.rid in LOWS for b in h.runner.batches[later:] for r in b.reqs)
    h.run()
    for rid, ids in LOWS.items():
        assert h.out[rid].ids == reference(ids, KEPT_NEW), rid
