"""Real-time chunking's paper-exact guidance (`ModelRunner.denoise_vjp`) on the real pi0 / pi0.5
heads, one step at a time: at the same noisy chunk, time and guide, the guided velocity through
the paged prefix (the VJP through the action expert only, the pool's K/V constants) equals the
dense reference's, whose VJP autograd takes through the whole joint model
(`tests/support/rtc_reference.py`), to 1e-5 of the velocity's size. Per step, so the tiny
model's wide random weights (on which Jacobian guidance is chaotic over a whole chunk, and
whose guided velocities reach ~100) are fine here. Called as the scheduler calls it: inside
inference mode, on tensors made in it; the pool is left untouched."""

from __future__ import annotations

import pytest
import torch

from tests.support import pi0_reference as ref
from tests.support import rtc_reference
from tests.support.families import family_tokenizer
from tests.unit.policies.test_pi0_model import CASES, prefill, release, runner_for, text_ids
from vla_server.model.guidance import Guide
from vla_server.policies.pi0.tiny import pi0_model_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")
# (schedule, inference_delay, execution_horizon, max_guidance_weight, time)
STEPS = [("linear", 1, 4, 10.0, 1.0), ("exp", 2, 3, 10.0, 0.7), ("ones", 0, 4, 1.0, 0.4),
         ("zeros", 3, 4, 10.0, 0.1), ("linear", 2, 2, 5.0, 0.5)]  # fmt: skip


@pytest.mark.parametrize("kind", ["pi0", "pi05"])
def test_the_paged_vjp_equals_autograd_through_the_dense_model(kind):
    folder = str(pi0_model_path(kind, "bare"))
    runner, tokenizer = runner_for(kind), family_tokenizer(folder)
    dense = ref.SpecReference(folder, kind)
    both = [c for c in CASES if c.present == (True, True)]  # the dense prefix masks none
    worst = 0.0
    for n, step in enumerate(STEPS):
        case = both[n % len(both)]
        ids = text_ids(tokenizer, kind, case)
        request = prefill(runner, case.present_pixels, ids)
        generator = torch.Generator().manual_seed(n)
        x = torch.randn((1, 4, 32), generator=generator)
        prev = torch.randn((3, 3), generator=generator)
        state = case.state if kind == "pi0" else None
        pool = [b.clone() for b in runner.kv_pool.k_buffer]
        ours = _served_step(runner, request, x, prev, state, step)
        assert all(torch.equal(a, b) for a, b in zip(pool, runner.kv_pool.k_buffer, strict=True))
        release(runner, request)
        with torch.no_grad():
            prefix = dense.prefix(case.pixels, ids)
        expected, identity = (_dense_step(dense, prefix, x, prev, state, step, jacobian)
                              for jacobian in ("vjp", "identity"))  # fmt: skip
        assert (expected - identity).abs().max() > 1e-3  # the Jacobian matters here
        # float32 through a backward: the error scales with the (large, random) values
        error = float((ours - expected).abs().max() / expected.abs().max())
        worst = max(worst, error)
    assert worst <= 1e-5, worst


def _served_step(runner, request, x, prev, state, step) -> torch.Tensor:
    """`denoise_vjp` as the scheduler calls it: in inference mode, on tensors made in it."""
    schedule, delay, horizon, beta, t = step
    guide = Guide.build(prev, delay, horizon, schedule=schedule, max_weight=beta,
                        jacobian="vjp", chunk_size=4, width=32)  # fmt: skip
    assert guide is not None
    with torch.inference_mode():
        x_inf, t_inf = x.clone(), torch.tensor([t])
        s = None if state is None else state[None].clone()
        return runner.denoise_vjp([request.row], [request.length], x_inf, t_inf, s, [guide])[0]


def _dense_step(dense, prefix, x, prev, state, step, jacobian) -> torch.Tensor:
    schedule, delay, horizon, beta, t = step
    t = float(torch.tensor(t))  # the float32 time the node sees
    target, weights = rtc_reference.target_and_weights(prev, delay, horizon, schedule, 4, 32)
    valid = [True] * len(prefix)

    def velocity(z: torch.Tensor) -> torch.Tensor:
        return dense.velocity(prefix, valid, z, t, state)

    return rtc_reference.guided_velocity(velocity, x[0], t, target, weights, beta, jacobian)
