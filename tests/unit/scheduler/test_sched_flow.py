"""Scheduling of pi0 / pi0.5 requests on the fake model: the prompt is prefilled once with
nothing sampled, then one denoising pass per step batches every request whose prompt is in
place (each at its own time t), the Euler steps run from t = 1 down in steps of 1/N, and the
chunk goes out once, with the request's end. The fake expert's velocity is a constant read
back through the request's KV (`sched_fakes.prompt_velocity`), so the chunk must come out as
noise - c, with the noise the documented function of the seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.sched_fakes import BOS, Harness, greedy, prompt_hash, prompt_velocity
from vla_server.io_struct import Tensor
from vla_server.policies.base import Denoise

SPEC = Denoise(chunk_size=5, width=6, num_steps=10)
PROMPTS = {f"r{i}": [BOS, *range(3 + i, 20 + 2 * i)] for i in range(4)}
# As the expert sees them: float32, as transformers' PI0 passes them.
TIMES = [float(np.float32(t)) for t in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)]


def _noise(seed: int) -> np.ndarray:
    g = torch.Generator("cpu").manual_seed(seed)
    return torch.randn((1, 5, 6), generator=g, dtype=torch.float32)[0].numpy()


def _submit(h: Harness, rid: str, seed: int, ids: list[int] | None = None, **fields) -> None:
    ids = ids or PROMPTS[rid]
    params = greedy(0, seed=seed)
    h.submit(rid, ids, sampling=params, num_actions=5, prefix_lm_len=len(ids), **fields)


def _times(h: Harness, ids: list[int]) -> list[float]:
    key = prompt_hash(ids)
    return [t for seen in h.model.denoise_passes for k, t in seen if k == key]


@pytest.mark.parametrize("threaded", [False, True])
def test_a_stub_velocity_gives_noise_minus_c_at_times_one_to_a_tenth(threaded):
    h = Harness(prefix_lm=True, head=SPEC, threaded=threaded)
    try:
        _submit(h, "r0", seed=7)
        h.run()
        res = h.out["r0"]
        c = prompt_velocity(prompt_hash(PROMPTS["r0"]))
        assert res.finish_type == "actions" and res.ids == [] and res.action_chunks_sent == 1
        np.testing.assert_allclose(res.action_chunk, _noise(7) - c, atol=1e-6)
        assert _times(h, PROMPTS["r0"]) == TIMES
        # The prompt was prefilled once and nothing was sampled from it.
        prefills = [b for b in h.runner.batches if b.reqs]
        assert [len(t) for b in prefills for t in b.tokens] == [len(PROMPTS["r0"])]
        assert not any(s for b in prefills for s in b.sample)
        h.assert_clean()
    finally:
        h.close()


def test_four_robots_denoise_in_shared_passes_and_get_their_own_chunks():
    alone = {}
    for rid in PROMPTS:
        h = Harness(prefix_lm=True, head=SPEC)
        _submit(h, rid, seed=int(rid[1]) + 10)
        h.run()
        alone[rid] = h.out[rid].action_chunk
    h = Harness(prefix_lm=True, head=SPEC)
    for rid in PROMPTS:
        _submit(h, rid, seed=int(rid[1]) + 10)
        h.step()  # staggered: the robots are at different steps in the shared passes
    h.run()
    for rid, chunk in alone.items():
        np.testing.assert_array_equal(h.out[rid].action_chunk, chunk)
    widths = [len(p) for p in h.model.denoise_passes]
    assert max(widths) == 4 and sum(widths) == 4 * SPEC.num_steps
    assert len(widths) < 4 * SPEC.num_steps
    mixed = [sorted({t for _, t in p}) for p in h.model.denoise_passes if len(p) == 4]
    assert any(len(ts) > 1 for ts in mixed)  # one pass, several robots' times
    h.assert_clean()


def test_the_prompt_stays_cached_and_a_repeat_reuses_all_of_it():
    h = Harness(prefix_lm=True, head=SPEC)
    _submit(h, "r1", seed=3)
    h.run()
    # Only the prompt's K/V stay in the pool (as an evictable cached prefix).
    assert h.kv.tree.evictable_size() == len(PROMPTS["r1"])
    batches = len(h.runner.batches)
    _submit(h, "again", seed=3, ids=PROMPTS["r1"])
    h.run()
    assert h.out["again"].meta.cached_tokens == len(PROMPTS["r1"])
    assert not any(b.reqs for b in h.runner.batches[batches:])  # no forward at all
    np.testing.assert_array_equal(h.out["again"].action_chunk, h.out["r1"].action_chunk)
    h.assert_clean()


def test_pi0_state_reaches_the_expert():
    h = Harness(prefix_lm=True, head=SPEC)
    state = np.array([0.25, -0.5, 1.0], dtype=np.float32)
    _submit(h, "r2", seed=1, state=Tensor.from_numpy(state))
    h.run()
    c = prompt_velocity(prompt_hash(PROMPTS["r2"])) + float(state.sum())
    np.testing.assert_allclose(h.out["r2"].action_chunk, _noise(1) - c, atol=1e-6)


def test_a_lone_robots_steps_run_back_to_back_in_one_batch():
    """Nothing else running or waiting: after the batch with its prefill, the robot's ten steps
    run in one batch, at the same times as one by one."""
    h = Harness(prefix_lm=True, head=SPEC)
    _submit(h, "r0", seed=7)
    h.run()
    steps = [b.denoise_steps for b in h.runner.batches if b.denoise]
    assert steps == [SPEC.num_steps]
    assert _times(h, PROMPTS["r0"]) == TIMES
    _submit(h, "late", seed=7, ids=PROMPTS["r1"], deadline=h.clock.time() + 60.0)
    h.run()  # a deadline is checked between steps: one step per batch
    steps = [b.denoise_steps for b in h.runner.batches if b.denoise]
    assert steps[1:] == [1] * SPEC.num_steps
    h.assert_clean()


def test_an_abort_while_denoising_sends_no_chunk_and_frees_everything():
    h = Harness(prefix_lm=True, head=SPEC)
    _submit(h, "r0", seed=1)
    h.run_until(lambda: len(_times(h, PROMPTS["r0"])) >= 3, "three passes")
    h.abort("r0")
    h.run()
    assert h.out["r0"].finish_type == "abort" and h.out["r0"].action_chunk is None
    h.assert_clean()


def test_a_retracted_robot_restarts_from_its_noise():
    h = Harness(prefix_lm=True, head=SPEC, enable_priority_scheduling=True, max_running_requests=2)
    _submit(h, "r1", seed=4, priority=0)  # a second robot: r0 steps once per pass
    _submit(h, "r0", seed=5, priority=0)
    h.run_until(lambda: len(_times(h, PROMPTS["r0"])) >= 4, "four passes")
    _submit(h, "vip", seed=6, ids=PROMPTS["r3"], priority=100)  # takes the newest one's slot
    h.run()
    assert h.out["r0"].meta.num_retractions == 1
    c = prompt_velocity(prompt_hash(PROMPTS["r0"]))
    np.testing.assert_allclose(h.out["r0"].action_chunk, _noise(5) - c, atol=1e-6)
    assert _times(h, PROMPTS["r0"])[-SPEC.num_steps :] == TIMES
    h.assert_clean()


def test_a_robot_that_cannot_finish_denoising_in_time_ends_at_its_deadline():
    h = Harness(prefix_lm=True, head=SPEC)
    _submit(h, "r0", seed=2)
    h.run()  # teaches the node what a denoising pass costs
    _submit(h, "late", seed=2, ids=PROMPTS["r1"], deadline=h.clock.time() + 0.05)
    h.run()
    assert h.out["late"].finish_type == "deadline" and h.out["late"].action_chunk is None
    assert 0 < len(_times(h, PROMPTS["r1"])) < SPEC.num_steps  # ended early, not at its end
    h.assert_clean()


def test_a_robots_newer_frame_supersedes_its_waiting_one():
    """The node is busy (one slot, held by another robot's denoising); a robot's second frame
    ends its first, still waiting, and only the newest frame's chunk is denoised."""
    h = Harness(prefix_lm=True, head=SPEC, max_running_requests=1)
    _submit(h, "r0", seed=1)
    h.step()
    _submit(h, "r1", seed=2, session_id="arm", supersede=True)
    _submit(h, "r2", seed=3, session_id="arm", supersede=True)
    assert h.out["r1"].finish_type == "superseded" and h.out["r1"].action_chunk is None
    h.run()
    c = prompt_velocity(prompt_hash(PROMPTS["r2"]))
    np.testing.assert_allclose(h.out["r2"].action_chunk, _noise(3) - c, atol=1e-6)
    assert _times(h, PROMPTS["r1"]) == []
    h.assert_clean()
