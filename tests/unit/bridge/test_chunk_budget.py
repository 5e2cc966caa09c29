"""What the bridge asks for when chunks cannot arrive in time (synthetic times)."""

from __future__ import annotations

import pytest

from ros_bridge.chunk_budget import MAX_PERIOD_S, ChunkBudget

FRAME, DEADLINE, PERIOD = 0.0, 1.0, 0.1  # the frame at 0 s, its deadline at 1 s


def test_due_times_follow_the_executor_or_the_deadline() -> None:
    budget = ChunkBudget(3, PERIOD)
    assert budget.due_times(FRAME, DEADLINE, executor=True) == pytest.approx([0.1, 0.2, 0.3])
    assert budget.due_times(FRAME, DEADLINE, executor=False) == pytest.approx([1.0, 1.1, 1.2])


def test_chunks_with_an_action_in_time_change_nothing() -> None:
    budget = ChunkBudget(4, PERIOD)
    due = budget.due_times(FRAME, DEADLINE, executor=True)
    assert budget.observe([0.35, 0.36, 0.37, 0.38], due, FRAME, executor=True) is None
    assert budget.observe([0.2, 1.05, 1.2, 1.3], [1.0, 1.1, 1.2, 1.3], FRAME, False) is None
    assert (budget.num_actions, budget.action_period_s) == (4, PERIOD)


def test_with_an_executor_a_useless_chunk_lengthens_the_period_to_fit_it() -> None:
    budget = ChunkBudget(4, PERIOD)
    due = budget.due_times(FRAME, DEADLINE, executor=True)  # 0.1 .. 0.4
    change = budget.observe([0.5, 0.6, 0.7, 0.8], due, FRAME, executor=True)
    # the last action came 0.8 s after the frame: 4 periods of 0.2 s, a quarter to spare
    assert budget.action_period_s == pytest.approx(0.25)
    assert change is not None and "from 100 to 250 ms" in change
    later = budget.due_times(FRAME, DEADLINE, executor=True)
    assert [a <= d for a, d in zip([0.5, 0.6, 0.7, 0.8], later, strict=True)] == [0, 0, 1, 1]
    assert budget.num_actions == 4


def test_with_an_executor_no_action_at_all_doubles_the_period_up_to_a_limit() -> None:
    budget = ChunkBudget(4, PERIOD)
    assert budget.observe([], [], FRAME, executor=True) is not None
    assert budget.action_period_s == pytest.approx(0.2)
    for _ in range(10):
        budget.observe([], [], FRAME, executor=True)
    assert budget.action_period_s == MAX_PERIOD_S
    assert budget.observe([], [], FRAME, executor=True) is None  # at the limit: nothing new


def test_without_an_executor_streamed_actions_late_after_k_ask_for_k() -> None:
    budget = ChunkBudget(10, PERIOD)
    due = budget.due_times(FRAME, DEADLINE, executor=False)
    # 0.2 s an action against a 0.1 s period: the first 2 are in time, then they fall behind
    change = budget.observe([0.85 + 0.2 * i for i in range(10)], due, FRAME, executor=False)
    assert change is not None and "num_actions 10 -> 2" in change
    assert budget.num_actions == 2
    due = budget.due_times(FRAME, DEADLINE, executor=False)
    assert budget.observe([0.85, 1.05], due, FRAME, executor=False) is None  # it holds


def test_without_an_executor_a_late_first_action_changes_nothing() -> None:
    budget = ChunkBudget(5, PERIOD)
    due = budget.due_times(FRAME, DEADLINE, executor=False)
    assert budget.observe([1.5] * 5, due, FRAME, executor=False) is None
    assert (budget.num_actions, budget.action_period_s) == (5, PERIOD)
