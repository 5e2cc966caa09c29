"""SmolVLA's chunks against the test-only reference (`tests/support/smolvla_reference.py`:
dense joint attention, the prefix recomputed at every step, same seeded noise), from raw
observations to the robot's actions; then what a server relies on: rows at different
denoising steps and prefix lengths batched equal each alone, the chunk is causal, seeds."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.support import smolvla_cases as sc
from tests.support import smolvla_reference as ref
from vla_server.model.denoise import initial_noise
from vla_server.policies.smolvla import PrefixKV
from vla_server.policies.smolvla.processor import Observation
from vla_server.policies.smolvla.tiny import CAMERAS, TinySpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLAIN, EMPTY_SLOT = TinySpec(), TinySpec(empty_cameras=1)
TOKENS_MIXED = TinySpec(seed=3, empty_cameras=1, add_image_special_tokens=True, mixed_dtypes=True)
# 2 cameras and 1 camera (with empty_cameras 0 left out; with 1, a masked empty slot), each with
# both instructions and both states; plus image special tokens on bfloat16-stored weights.
CASES = [
    *itertools.product([PLAIN], [CAMERAS, CAMERAS[:1], CAMERAS[1:]], sc.INSTRUCTIONS, sc.STATES),
    *itertools.product([EMPTY_SLOT], [CAMERAS[:1]], sc.INSTRUCTIONS, sc.STATES),
    *itertools.product([TOKENS_MIXED], [CAMERAS, CAMERAS[1:]], sc.INSTRUCTIONS[:1], sc.STATES[:1]),
]


def case_id(case) -> str:
    spec, cameras, instruction, state = case
    kind = {PLAIN: "plain", EMPTY_SLOT: "empty-slot", TOKENS_MIXED: "tokens-mixed"}[spec]
    cams = "+".join(c[-1] for c in cameras)
    return f"{kind}-cam{cams}-{instruction[:4]}-s{sc.STATES.index(state)}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_chunk_equals_the_reference(case):
    spec, cameras, instruction, state = case
    obs = sc.observation(cameras, instruction, state, seed=len(cameras))
    seed = 7 + sc.STATES.index(state)
    ours = sc.policy(spec).predict_action_chunk(obs, seeds=[seed])
    noise = initial_noise(seed, 10, 32)
    _, theirs = ref.sample(sc.reference(spec), obs.images, obs.state, obs.task, noise)
    assert ours.shape == theirs.shape == (1, 10, 6)
    assert theirs.abs().max() > 0.5  # far from a degenerate 0 chunk
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


def contexts(observations: list[Observation]):
    model, processor = sc.policy().model, sc.policy().processor
    prefixes = [model.prefix_kv(processor(o)) for o in observations]
    alone = [model.expert_context(p) for p in prefixes]
    return model, prefixes, alone, model.expert_context(PrefixKV.batch(prefixes))


def three_rows() -> list[Observation]:
    """Three prefixes of different lengths: 2 cameras, 1 camera, other text and state."""
    return [
        sc.observation(CAMERAS, sc.INSTRUCTIONS[1], sc.STATES[0], seed=1),
        sc.observation(CAMERAS[:1], sc.INSTRUCTIONS[0], sc.STATES[1], seed=2),
        sc.observation(CAMERAS[1:], "push the cube", sc.STATES[0], seed=3),
    ]


def test_rows_at_different_steps_batched_equal_each_alone():
    model, prefixes, alone, batched = contexts(three_rows())
    assert len(set(batched.lens.tolist())) == 3
    x = torch.randn(3, 10, 32, generator=torch.Generator().manual_seed(0))
    times = torch.tensor([1.0, 0.7, 0.1])
    together = model.velocity(batched, x, times)
    for i in range(3):
        single = model.velocity(alone[i], x[i : i + 1], times[i : i + 1])
        torch.testing.assert_close(together[i : i + 1], single, atol=1e-5, rtol=0)


def test_a_batched_chunk_equals_each_row_alone():
    policy = sc.policy()
    rows = [
        sc.observation(CAMERAS, text, state, seed=4)
        for text, state in zip(sc.INSTRUCTIONS, sc.STATES, strict=True)
    ]
    both = Observation(
        {k: torch.cat([r.images[k] for r in rows]) for k in CAMERAS},
        torch.cat([r.state for r in rows]),
        [r.task[0] for r in rows],
    )
    together = policy.predict_action_chunk(both, seeds=[11, 12])
    for i, row in enumerate(rows):
        alone = policy.predict_action_chunk(row, seeds=[11 + i])
        torch.testing.assert_close(together[i : i + 1], alone, atol=1e-5, rtol=0)


def test_prefix_kv_rows_split_and_batch_back():
    _, prefixes, _, _ = contexts(three_rows())
    batch = PrefixKV.batch(prefixes)
    for i, prefix in enumerate(prefixes):
        row = batch.row(i)
        assert torch.equal(row.valid, prefix.valid)
        assert all(torch.equal(a, b) for a, b in zip(row.keys, prefix.keys, strict=True))
        k, v = batch.layer_tokens(i, 2)
        assert k.shape == (int(prefix.lens[0]), 2, 16) and torch.equal(v, prefix.values[2][0])


def test_the_chunk_is_causal_over_its_actions():
    model, _, alone, _ = contexts(three_rows()[:1])
    x = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(1))
    v = model.velocity(alone[0], x, torch.tensor([0.6]))
    x2 = x.clone()
    x2[:, 6] += 1.0
    v2 = model.velocity(alone[0], x2, torch.tensor([0.6]))
    assert torch.equal(v[:, :6], v2[:, :6])
    assert not torch.allclose(v[:, 6:], v2[:, 6:])


def test_seeded_noise_follows_the_denoise_rule_and_repeats():
    policy = sc.policy()
    obs = sc.observation(CAMERAS, sc.INSTRUCTIONS[0], sc.STATES[0])
    seeded = policy.predict_action_chunk(obs, seeds=[5])
    explicit = policy.predict_action_chunk(obs, noise=initial_noise(5, 10, 32))
    assert torch.equal(seeded, explicit)
    assert not torch.equal(seeded, policy.predict_action_chunk(obs, seeds=[6]))


def test_velocity_checks_its_shapes():
    model, _, alone, _ = contexts(three_rows()[:1])
    with pytest.raises(ValueError, match="x_t must be"):
        model.velocity(alone[0], torch.zeros(1, 9, 32), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="time must be"):
        model.velocity(alone[0], torch.zeros(1, 10, 32), torch.tensor([1.0, 0.5]))


@pytest.mark.parametrize("spec", [PLAIN, TOKENS_MIXED], ids=["float32-stored", "mixed-stored"])
def test_bfloat16_weights_stay_near_float32(spec):
    """Loose: bfloat16 VLM and expert (heads float32) through 10 steps, on chunks of ~5."""
    obs = sc.observation(CAMERAS, sc.INSTRUCTIONS[0], sc.STATES[0])
    full = sc.policy(spec).predict_action_chunk(obs, seeds=[3])
    half = sc.policy(spec, torch.bfloat16).predict_action_chunk(obs, seeds=[3])
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, full, atol=0.1, rtol=0)
