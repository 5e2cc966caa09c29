"""Real-time chunking's math (`model/guidance.py`) against shared/reference/rtc.md: the prefix
weights of every schedule (its test vectors, and kinetix's formula over a grid that includes
start >= end, end > total and start = 0), the guidance weight g(t), LeRobot's own unit-test
numbers for the identity correction, the paper's VJP (1.475 where LeRobot's code gives 1.8) and
a VJP against finite differences; a guide whose weights are all 0 is no guide."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.support import rtc_reference as ref
from vla_server.model.guidance import (
    SCHEDULES,
    Guide,
    GuideBatch,
    guidance_scale,
    identity_velocity,
    prefix_weights,
    vjp_velocity,
)

CPU = torch.device("cpu")


def test_the_reference_vectors():
    linear = prefix_weights("linear", 5, 14, 25)
    expected = [1.0] * 5 + [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1] + [0.0] * 11
    torch.testing.assert_close(linear, torch.tensor(expected), atol=1e-6, rtol=0)
    exp = prefix_weights("exp", 5, 14, 25)[5:14]
    values = [0.7645, 0.5706, 0.4130, 0.2871, 0.1888, 0.1145, 0.0611, 0.0258, 0.0061]
    torch.testing.assert_close(exp, torch.tensor(values), atol=1e-4, rtol=0)
    assert prefix_weights("zeros", 3, 10, 12).tolist() == [1.0] * 3 + [0.0] * 9
    assert prefix_weights("ones", 3, 10, 12).tolist() == [1.0] * 10 + [0.0] * 2


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_is_kinetix_formula(schedule):
    for start, end, total in itertools.product((0, 1, 3, 10, 30), (1, 3, 10, 25), (4, 25, 50)):
        if end > total:
            continue  # the node clamps end to the previous chunk, which is at most the chunk
        ours = prefix_weights(schedule, start, end, total)
        assert ours.shape == (total,) and ours.dtype == torch.float32
        theirs = ref.prefix_weights(schedule, start, end, total)
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_guidance_weight_table():
    times = torch.tensor([1.0 - k / 10 for k in range(10)] + [0.0], dtype=torch.float32)
    g = guidance_scale(times, torch.full((11,), 10.0))
    table = [10, 9.111, 4.25, 2.762, 2.167, 2.0, 2.167, 2.762, 4.25, 9.111, 0.0]
    torch.testing.assert_close(g, torch.tensor(table), atol=1e-3, rtol=0)
    assert torch.isfinite(g).all()
    assert guidance_scale(times, torch.full((11,), 1.0)).tolist() == [1.0] * 10 + [0.0]
    written = [ref.guidance_weight(t, 10.0) for t in times.tolist()]
    torch.testing.assert_close(g, torch.tensor(written), atol=1e-5, rtol=0)


def _guide(prev: float, delay: int, end: int, total: int, jacobian: str) -> GuideBatch:
    guide = Guide.build(
        torch.full((total, 1), prev), delay, end, schedule="zeros", max_weight=10.0,
        jacobian=jacobian, chunk_size=total, width=1,
    )  # fmt: skip
    assert guide is not None
    return GuideBatch.stack([guide], CPU)


def test_lerobots_identity_numbers_and_the_papers_vjp():
    """rtc.md: x = 1, v = 0.5 x, t = 0.5, Y = 0.1, d = 5, end = 10 gives 1.8 where W = 1 (the
    identity Jacobian); the true VJP gives 1.475; where W = 0, v' = v = 0.5."""
    x, t = torch.ones((1, 10, 1)), torch.tensor([0.5])
    guide = _guide(0.1, 5, 10, 10, "identity")
    out = identity_velocity(x, 0.5 * x, t, guide)[0, :, 0]
    torch.testing.assert_close(out, torch.tensor([1.8] * 5 + [0.5] * 5))
    out = vjp_velocity(lambda z: 0.5 * z, x, t, guide)[0, :, 0]
    torch.testing.assert_close(out, torch.tensor([1.475] * 5 + [0.5] * 5))


def test_the_vjp_equals_finite_differences():
    torch.manual_seed(0)
    weight = torch.randn(6, 6, dtype=torch.float64) * 0.5

    def velocity(z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(z @ weight.to(z.dtype))

    x = torch.randn((2, 4, 6), dtype=torch.float64)
    t = torch.tensor([0.7, 0.3], dtype=torch.float64)
    guides = [
        Guide.build(torch.randn(3, 5), 1, 3, schedule="linear", max_weight=5.0,
                    jacobian="vjp", chunk_size=4, width=6)
        for _ in range(2)
    ]  # fmt: skip
    batch = GuideBatch.stack(guides, CPU)
    batch = GuideBatch(batch.target.double(), batch.weights.double(), batch.max_weight.double())
    ours = vjp_velocity(velocity, x, t, batch)
    # corr = J^T err, J = d(x - t v(x))/dx, by central differences of <err, x1(x)>
    v = velocity(x)
    err = batch.error(x, v, t)
    corr = torch.zeros_like(x)
    for idx in itertools.product(*(range(n) for n in x.shape)):
        step = torch.zeros_like(x)
        step[idx] = 1e-6
        up = ((x + step) - t[:, None, None] * velocity(x + step)) * err
        down = ((x - step) - t[:, None, None] * velocity(x - step)) * err
        corr[idx] = (up.sum() - down.sum()) / 2e-6
    expected = v - guidance_scale(t, batch.max_weight)[:, None, None] * corr
    torch.testing.assert_close(ours, expected, atol=1e-7, rtol=0)


def test_a_guide_of_zero_weights_is_none_and_the_end_is_clamped():
    prev = torch.ones(6, 2)
    common = {"max_weight": 10.0, "jacobian": "identity", "chunk_size": 10, "width": 4}
    assert Guide.build(prev, 0, 10, schedule="zeros", **common) is None
    guide = Guide.build(prev, 2, 25, schedule="ones", **common)
    assert guide is not None
    # end = min(25, 6): the previous chunk has 6 actions; its rows and dims are zero-padded.
    assert guide.weights[0, :, 0].tolist() == [1.0] * 6 + [0.0] * 4
    assert guide.target.shape == (1, 10, 4) and guide.target.sum() == 12
