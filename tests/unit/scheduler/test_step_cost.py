"""The online step-time model of priority isolation: predictions from measured steps, and the
tokens a protected step can take on within a tolerance."""

from __future__ import annotations

import pytest

from vla_server.scheduler.step_cost import MAX_TOKENS, StepCostModel


def fitted(cost, sizes=(1, 2, 4, 8, 16, 64, 256)) -> StepCostModel:
    m = StepCostModel()
    for n in sizes:
        m.observe(n, cost(n))
    return m


def test_step_cost_knows_nothing_before_a_measurement():
    m = StepCostModel()
    assert m.predict(4) is None
    assert m.allowance(1, 0.05) == 0


def test_step_cost_cpu_like_rows_cost_so_the_allowance_is_small():
    m = fitted(lambda n: 0.01 + 0.002 * n)
    assert m.predict(3) == pytest.approx(0.016)
    assert m.predict(512) == pytest.approx(0.01 + 0.002 * 512)  # along the last slope
    assert m.allowance(1, 0.05) == 0  # one more row is +16 %
    assert m.allowance(64, 0.05) == 3  # 5 % of 138 ms is 6.9 ms: 3 tokens at 2 ms
    assert m.allowance(1, 0.0) == 0


def test_step_cost_gpu_like_rows_are_free_so_the_allowance_is_large():
    m = fitted(lambda n: 0.01)
    assert m.allowance(1, 0.05) == MAX_TOKENS


def test_step_cost_is_pessimistic_below_the_smallest_step_seen():
    m = fitted(lambda n: 0.01, sizes=(8, 16))
    assert m.predict(2) == pytest.approx(0.0025)
    assert m.allowance(2, 0.05) == 0


def test_step_cost_predictions_never_decrease_with_tokens():
    m = fitted(lambda n: {1: 0.02, 2: 0.01, 4: 0.03}[n], sizes=(1, 2, 4))
    assert m.predict(2) == pytest.approx(0.02)
    assert m.predict(1) <= m.predict(2) <= m.predict(3) <= m.predict(4)


def test_step_cost_moving_average_follows_a_change():
    m = fitted(lambda n: 0.01, sizes=(4,))
    for _ in range(100):
        m.observe(4, 0.02)
    assert m.predict(4) == pytest.approx(0.02, rel=1e-3)
