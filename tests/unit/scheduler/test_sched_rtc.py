"""Real-time chunking in the scheduler, on the fake model (its velocity is a constant c read
back through the request's KV, so a guided chunk has a closed form): a guided request's chunk
is LeRobot's guided Euler integration (written here from rtc.md's formula), guided and unguided
robots share the denoising passes (identity) or add one Jacobian pass per step (vjp), robots
without guidance get bit for bit what they get alone, a guide whose weights are all 0 is no
guide, and guidance that does not fit the head is refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support import rtc_reference as ref
from tests.support.sched_fakes import BOS, Harness, greedy, prompt_hash, prompt_velocity
from vla_server.io_struct import Guidance, RtcOptions, Tensor
from vla_server.policies.base import Denoise

SPEC = Denoise(chunk_size=5, width=6, num_steps=10)
PROMPTS = {f"r{i}": [BOS, *range(3 + i, 20 + 2 * i)] for i in range(4)}
TIMES = [float(np.float32(t)) for t in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)]
PREV = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)


def _noise(seed: int) -> np.ndarray:
    g = torch.Generator("cpu").manual_seed(seed)
    return torch.randn((1, 5, 6), generator=g, dtype=torch.float32)[0].numpy()


def _guidance(delay: int = 2, horizon: int = 4, schedule: str = "linear", beta: float = 5.0,
              jacobian: str = "identity", prev: np.ndarray = PREV) -> Guidance:  # fmt: skip
    options = RtcOptions(schedule, beta, jacobian)  # type: ignore[arg-type]
    return Guidance(Tensor.from_numpy(prev), delay, horizon, options)


def _submit(h: Harness, rid: str, seed: int, guidance: Guidance | None = None) -> None:
    ids = PROMPTS[rid]
    h.submit(rid, ids, sampling=greedy(0, seed=seed), num_actions=5, prefix_lm_len=len(ids),
             guidance=guidance)  # fmt: skip


def _expected(rid: str, seed: int, g: Guidance) -> np.ndarray:
    """LeRobot's guided integration with v = c (rtc.md): v' = v - g(t) W (Y - (x - t v))."""
    c = prompt_velocity(prompt_hash(PROMPTS[rid]))
    prev = g.prev_chunk.to_numpy()
    w = ref.prefix_weights(g.rtc.schedule, g.inference_delay,
                           min(g.execution_horizon, len(prev)), 5).numpy()[:, None]  # fmt: skip
    y = np.zeros((5, 6), np.float64)
    y[: len(prev)] = prev
    x = _noise(seed).astype(np.float64)
    for t in TIMES:
        v = c - ref.guidance_weight(t, g.rtc.max_guidance_weight) * w * (y - (x - t * c))
        x = x - 0.1 * v
    return x


def _alone(rid: str, seed: int, guidance: Guidance | None = None) -> np.ndarray:
    h = Harness(prefix_lm=True, head=SPEC)
    _submit(h, rid, seed, guidance)
    h.run()
    h.assert_clean()
    return h.out[rid].action_chunk


@pytest.mark.parametrize("schedule", ["zeros", "ones", "linear", "exp"])
@pytest.mark.parametrize("jacobian", ["identity", "vjp"])
def test_a_guided_chunk_is_lerobots_guided_integration(schedule, jacobian):
    g = _guidance(delay=2, horizon=4, schedule=schedule, jacobian=jacobian)
    chunk = _alone("r0", 7, g)
    np.testing.assert_allclose(chunk, _expected("r0", 7, g), atol=1e-5)
    c = prompt_velocity(prompt_hash(PROMPTS["r0"]))
    # The guided rows moved toward the previous chunk; the rows past the horizon did not move.
    unguided = _noise(7) - c
    assert np.abs(chunk[:2] - PREV[:2]).mean() < np.abs(unguided[:2] - PREV[:2]).mean()
    np.testing.assert_allclose(chunk[4:], unguided[4:], atol=1e-6)


def test_guided_and_unguided_robots_share_passes_and_the_unguided_get_their_own_chunks():
    alone = {rid: _alone(rid, 20 + k) for k, rid in enumerate(PROMPTS)}
    h = Harness(prefix_lm=True, head=SPEC)
    guides = {"r0": None, "r1": _guidance(0), "r2": _guidance(3, schedule="exp"), "r3": None}
    for k, rid in enumerate(PROMPTS):
        _submit(h, rid, 20 + k, guides[rid])
    h.run()
    for rid in ("r0", "r3"):
        np.testing.assert_array_equal(h.out[rid].action_chunk, alone[rid])
    for k, rid in enumerate(("r1", "r2")):
        expected = _expected(rid, 21 + k, guides[rid])  # type: ignore[arg-type]
        np.testing.assert_allclose(h.out[rid].action_chunk, expected, atol=1e-5)
    # identity guidance costs no pass: 10 passes of the four rows
    assert [len(p) for p in h.model.denoise_passes] == [4] * SPEC.num_steps
    assert h.model.vjp_passes == 0
    h.assert_clean()


def test_vjp_rows_take_one_more_pass_per_step_and_the_others_are_unchanged():
    alone = _alone("r0", 5)
    h = Harness(prefix_lm=True, head=SPEC)
    vjp, identity = _guidance(jacobian="vjp"), _guidance()
    _submit(h, "r0", 5)
    _submit(h, "r1", 6, vjp)
    _submit(h, "r2", 6, identity)
    h.run()
    np.testing.assert_array_equal(h.out["r0"].action_chunk, alone)
    # The fake velocity does not depend on x: the paper's VJP is the identity here.
    for rid, g in (("r1", vjp), ("r2", identity)):
        expected = _expected(rid, 6, g)
        np.testing.assert_allclose(h.out[rid].action_chunk, expected, atol=1e-5)
    assert [len(p) for p in h.model.denoise_passes] == [2, 1] * SPEC.num_steps
    assert h.model.vjp_passes == SPEC.num_steps
    h.assert_clean()


def test_a_guide_of_zero_weights_is_the_unguided_chunk_bit_for_bit():
    for jacobian in ("identity", "vjp"):
        g = _guidance(delay=0, schedule="zeros", jacobian=jacobian)
        np.testing.assert_array_equal(_alone("r1", 3, g), _alone("r1", 3))


@pytest.mark.parametrize(
    ("guidance", "field"),
    [
        (_guidance(prev=np.zeros((4, 5), np.float32)), "prev_chunk"),  # not the head's width
        (_guidance(prev=np.zeros((6, 6), np.float32)), "prev_chunk"),  # longer than the chunk
        (_guidance(delay=5, horizon=10), "inference_delay"),  # beyond prev_chunk's 4 actions
        (_guidance(beta=float("nan")), "rtc.max_guidance_weight"),
    ],
)
def test_guidance_that_does_not_fit_the_head_is_refused(guidance, field):
    h = Harness(prefix_lm=True, head=SPEC)
    _submit(h, "r0", 1, guidance)
    h.run()
    assert h.out["r0"].finish_type == "abort" and h.out["r0"].finish["field"] == field
    assert h.out["r0"].finish["status_code"] == 400
    h.assert_clean()
