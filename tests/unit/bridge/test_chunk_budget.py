"""How many actions the bridge asks for when chunks cannot arrive in time (synthetic times)."""

from __future__ import annotations

from ros_bridge.chunk_budget import ChunkBudget

DUE, PERIOD = 1.0, 0.1  # the first action is due at 1.0 s, the next ones 0.1 s apart


def test_a_chunk_whose_actions_all_arrive_in_time_changes_nothing() -> None:
    budget = ChunkBudget(4)
    assert budget.observe([0.2, 1.05, 1.2, 1.3], DUE, PERIOD) is None
    assert budget.num_actions == 4


def test_streamed_actions_late_after_the_first_k_ask_for_k() -> None:
    budget = ChunkBudget(10)
    # 0.2 s an action against a 0.1 s period: the first 2 are in time, then they fall behind
    change = budget.observe([0.85 + 0.2 * i for i in range(10)], DUE, PERIOD)
    assert change is not None and "num_actions 10 -> 2" in change
    assert budget.num_actions == 2
    assert budget.observe([0.85, 1.05], DUE, PERIOD) is None  # 2 in time: it holds


def test_a_partial_chunk_the_server_ended_counts_what_came() -> None:
    budget = ChunkBudget(8)
    change = budget.observe([0.5, 0.6], DUE, PERIOD)  # the server ended it after 2
    assert change is not None and budget.num_actions == 2


def test_a_chunk_late_from_its_first_action_is_reported_once_and_not_shortened() -> None:
    budget = ChunkBudget(5)
    late = [1.5] * 5  # a denoised chunk comes whole, after its first action was due
    change = budget.observe(late, DUE, PERIOD)
    assert change is not None and "first action came after its due time" in change
    assert budget.num_actions == 5
    assert budget.observe(late, DUE, PERIOD) is None  # said once
