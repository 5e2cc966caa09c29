"""The scheduler's pure policy pieces against rules written out independently here: queue order
(priority, then earliest deadline, then arrival), who may preempt whom, which running requests
are retracted to admit a more important one, KV budgets of a step, and the deadline estimator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_server.io_struct import FinishDeadline, TokenizedGenerateReqInput
from vla_server.model.sampling import SamplingParams
from vla_server.scheduler.deadline import StepTimer
from vla_server.scheduler.policy import (
    PolicyConfig,
    PrefillAdder,
    choose_victims,
    retraction_order,
)
from vla_server.scheduler.req import Req


def make_req(
    i: int,
    priority: int = 0,
    deadline: float | None = None,
    prompt: int = 4,
    new: int = 10,
    out: int = 0,
    kv: int | None = None,
) -> Req:
    wire = TokenizedGenerateReqInput(
        rid=f"r{i}",
        input_ids=list(range(1, prompt + 1)),
        sampling_params=SamplingParams(max_new_tokens=new),
        priority=priority,
        deadline=deadline,
    )
    r = Req.from_wire(wire)
    r.arrival_time = float(i)
    r.output_ids = [7] * out
    r.kv_len = prompt + out - 1 if kv is None else kv
    return r


def held_and_reserved(r: Req, ratio: float) -> int:
    """KV a running request gives back when retracted: the slots it holds plus what the step
    budget set aside for it (the rest of its sequence and `ratio` of its remaining tokens)."""
    total = len(r.origin_input_ids) + len(r.output_ids)
    left = max(r.sampling_params.max_new_tokens - len(r.output_ids), 0)
    return r.kv_len + (total - r.kv_len) + math.ceil(left * ratio)


reqs_strategy = st.lists(
    st.tuples(
        st.integers(-3, 3),
        st.one_of(st.none(), st.sampled_from([1.0, 2.0, 3.0])),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(reqs_strategy, st.booleans(), st.booleans())
def test_queue_order(specs, enabled, low_first):
    cfg = PolicyConfig(4, None, priority_enabled=enabled, low_values_first=low_first)
    reqs = [make_req(i, p, d) for i, (p, d) in enumerate(specs)]

    def before(a: Req, b: Req) -> bool:
        if enabled and a.priority != b.priority:
            return a.priority < b.priority if low_first else a.priority > b.priority
        da = math.inf if a.deadline is None else a.deadline
        db = math.inf if b.deadline is None else b.deadline
        if da != db:
            return da < db
        return a.arrival_time < b.arrival_time

    order = sorted(reqs, key=cfg.queue_key)
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            assert not before(b, a), (a, b)


@pytest.mark.parametrize(
    ("low_first", "new", "running", "preempts"),
    [
        (False, 11, 0, True),
        (False, 10, 0, False),  # a gap equal to the threshold is not enough
        (False, 0, 11, False),
        (True, 0, 11, True),
        (True, 11, 0, False),
        (True, 1, 11, False),
    ],
)
def test_may_preempt_needs_a_gap_above_the_threshold(low_first, new, running, preempts):
    cfg = PolicyConfig(4, None, priority_enabled=True, low_values_first=low_first)
    assert cfg.may_preempt(make_req(1, new), make_req(0, running)) is preempts
    off = PolicyConfig(4, None, priority_enabled=True, preemption_enabled=False)
    assert not off.may_preempt(make_req(1, 100), make_req(0, 0))
    assert not PolicyConfig(4, None).may_preempt(make_req(1, 100), make_req(0, 0))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), min_size=1, max_size=8),
    st.integers(0, 2),
    st.integers(0, 80),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_choose_victims(running_specs, slots, tokens, ratio):
    cfg = PolicyConfig(8, None, reserve_ratio=ratio, priority_enabled=True)
    new = make_req(100, priority=25)
    running = [make_req(i, p, out=o) for i, (p, o) in enumerate(running_specs)]
    victims = choose_victims(cfg, new, running, slots, tokens)
    # The independent rule: only requests 25 outranks by more than 10 (priority < 15), worst
    # priority first and the latest arrival first among equals, as few as cover the shortfall.
    eligible = sorted(
        (r for r in running if r.priority < 15), key=lambda r: (r.priority, -r.arrival_time)
    )
    taken = 0
    while taken < len(eligible) and (
        slots > taken or tokens > sum(held_and_reserved(r, ratio) for r in eligible[:taken])
    ):
        taken += 1
    covered = slots <= taken and tokens <= sum(
        held_and_reserved(r, ratio) for r in eligible[:taken]
    )
    assert victims == (eligible[:taken] if covered else None)


def test_retraction_order_lowest_priority_then_least_progress():
    cfg = PolicyConfig(8, None, priority_enabled=True)
    a, b, c, d = (
        make_req(0, 5, out=1),
        make_req(1, 0, out=9),
        make_req(2, 0, out=3),
        make_req(3, 0, out=3),
    )
    # priority 0 before 5; among those the fewest output tokens; then the latest arrival
    assert retraction_order(cfg, [a, b, c, d]) == [d, c, b, a]


def test_prefill_adder_budgets():
    cfg = PolicyConfig(3, 16, reserve_ratio=0.5)
    running = [make_req(0, prompt=10, new=10, out=4)]  # 13 in KV, 1 to compute, 6 left
    adder = PrefillAdder(cfg, 0.5, available=40, free_rows=5, running=running)
    assert adder.token_budget == 40 - (1 + 3)
    assert adder.slot_budget == 2
    new = make_req(1, prompt=20, new=8, out=0, kv=0)
    # 20 prompt tokens minus 5 cached, plus half of 8 new tokens
    need = 20 - 5 + 4
    assert adder.shortfall(new, 5) == (0, 0)
    adder.admit(new, 5)
    assert adder.token_budget == 36 - need and adder.slot_budget == 1
    assert adder.take_chunk(15) == 15 and adder.take_chunk(15) == 1 and adder.take_chunk(5) == 0
    big = make_req(2, prompt=30, new=8, kv=0)
    assert adder.shortfall(big, 0) == (0, 30 + 4 - adder.token_budget)
    adder.admit(big, 0)
    assert adder.shortfall(make_req(3, kv=0), 0)[0] == 1  # no slot left
    adder.give_back(running[0])
    assert adder.slot_budget == 1


def test_step_timer_estimates_and_deadline_checks():
    timer = StepTimer()
    timer.observe(4, True, 0.010)
    timer.observe(4, True, 0.020)
    assert timer.decode_step_s == pytest.approx(0.8 * 0.010 + 0.2 * 0.020)
    timer.observe(50, False, 0.100)
    assert timer.prefill_token_s == pytest.approx(0.002)
    r = make_req(0, prompt=11, new=10, kv=0, deadline=None)
    # 10 prompt tokens before the last one, then 10 decode steps
    left = 10 * 0.002 + 10 * timer.decode_step_s
    assert timer.time_left_s(r) == pytest.approx(left)
    assert timer.check(r, now=0.0) is None  # no deadline
    r = make_req(0, prompt=11, new=10, kv=0, deadline=100.0)
    assert timer.check(r, now=100.0 - left - 1e-3) is None
    soon = timer.check(r, now=100.0 - left + 1e-3)
    assert isinstance(soon, FinishDeadline) and "cannot finish" in soon.message
    late = timer.check(r, now=100.5)
    assert isinstance(late, FinishDeadline) and "missed" in late.message


def streamed_actions_req(out: int, deadline: float, period: float) -> Req:
    """5 actions of 4 tokens each, the prompt already in the KV."""
    wire = TokenizedGenerateReqInput(
        rid="robot",
        input_ids=[1, 2, 3],
        sampling_params=SamplingParams(max_new_tokens=20),
        num_actions=5,
        deadline=deadline,
        action_period=period,
        tokens_per_action=4,
    )
    r = Req.from_wire(wire)
    r.output_ids = [7] * out
    r.kv_len = 3 + out - 1 if out else 2
    return r


def test_a_request_whose_next_action_can_be_on_time_lives_on():
    timer = StepTimer()
    timer.observe(1, True, 0.1)  # 0.1 s a token: 0.4 s an action
    # 2 actions out; the whole chunk needs 12 more tokens (1.2 s) but ends due at 1.0 s
    r = streamed_actions_req(out=8, deadline=1.0, period=0.05)
    assert timer.time_left_s(r) == pytest.approx(1.2)
    # the next (third) action is due at 1.0 - 2 * 0.05 = 0.9 s and comes 0.4 s from now
    assert timer.check(r, now=0.5) is None
    ended = timer.check(r, now=0.5 + 1e-3)
    assert isinstance(ended, FinishDeadline) and "cannot finish" in ended.message
    # without a period (or for a chunk that comes whole) the whole chunk decides, as before
    whole = streamed_actions_req(out=8, deadline=1.0, period=0.0)
    assert isinstance(timer.check(whole, now=0.0), FinishDeadline)
    assert timer.check(whole, now=-0.21) is None
    # past the last due time nothing can be on time
    late = timer.check(r, now=1.01)
    assert isinstance(late, FinishDeadline) and "missed" in late.message
