"""pi0 and pi0.5 in the runner: the prefix prefilled into the paged pool, then
`num_inference_steps` expert passes (`ModelRunner.denoise`) and Euler steps, against

* pi0: transformers' own `PI0ForConditionalGeneration.sample_actions` (fp32, same noise) on the
  tiny checkpoint's weights, and the prefix K/V per layer against its PaliGemma cache;
* pi0.5 (not in transformers 5.24): the test-only `SpecReference` written from the spec, first
  cross-checked in pi0 mode against transformers' PI0 on the same weights;

with one camera (missing cameras either left out of the prompt, or, for transformers, given
tokens whose attention is masked, openpi's way) and two. Then the properties the serving side
relies on: the pool is only read, the counters, batching of requests at different prefix
lengths and times, and pi0's state token not seeing the actions."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import pytest
import torch

from tests.support import pi0_reference as ref
from tests.support.families import family_tokenizer
from tests.support.images import random_rgb
from tests.support.paligemma_prefill import prefill as prefill_prompt
from tests.support.pi0fast_reference import lerobot_pixels
from vla_server.model.denoise import denoise_times, euler_update
from vla_server.model.model_runner import ModelRunner
from vla_server.policies.pi0.tiny import IMAGE_SIZE, NUM_STEPS, pi0_model_path
from vla_server.policies.registry import detect

pytestmark = pytest.mark.usefixtures("one_torch_thread")

INSTRUCTIONS = ("pick up the red block", "open the drawer", "put the blue cup onto the plate")
FRAME_PAIRS = ((random_rgb(28, 28, seed=1), random_rgb(40, 60, seed=2)),
               (random_rgb(90, 50, seed=3), random_rgb(28, 28, seed=4)))  # fmt: skip
STATES = ((0.3, -1.2, 0.5, 2.0), (-0.7, 0.1, 1.5, -0.4))
# Which of the two cameras a case has, and (one camera) whether transformers gets the missing
# camera's tokens masked (openpi's layout) or none (its processor's).
CAMERAS = (((True, True), False), ((True, False), False), ((False, True), True),
           ((True, False), True), ((False, True), False), ((True, True), False))  # fmt: skip


@dataclass
class Case:
    pixels: torch.Tensor  # [2, 3, S, S], both cameras
    present: tuple[bool, bool]
    masked_tokens: bool
    instruction: str
    state: torch.Tensor  # [32] normalised, zero-padded
    seed: int

    @property
    def present_pixels(self) -> torch.Tensor:
        return self.pixels[[i for i, p in enumerate(self.present) if p]]


def cases() -> list[Case]:
    out = []
    product = itertools.product(INSTRUCTIONS, FRAME_PAIRS, STATES)
    for i, (instruction, frames, state) in enumerate(product):
        pixels = torch.stack([lerobot_pixels(f, IMAGE_SIZE, IMAGE_SIZE) for f in frames])
        padded = torch.zeros(32)
        padded[:4] = torch.tensor(state)
        present, masked = CAMERAS[i % len(CAMERAS)]
        out.append(Case(pixels, present, masked, instruction, padded, seed=100 + i))
    return out


CASES = cases()


def noise(seed: int) -> torch.Tensor:
    """The issue's documented draw of a request's noise."""
    generator = torch.Generator("cpu").manual_seed(seed)
    return torch.randn((1, 4, 32), generator=generator, dtype=torch.float32)


def text_ids(tokenizer, kind: str, case: Case) -> list[int]:
    if kind == "pi0":
        return tokenizer(f"{case.instruction}\n")["input_ids"]
    bins = " ".join(str(int(v * 40) + 128) for v in case.state[:4])
    return tokenizer(f"Task: {case.instruction}, State: {bins};\nAction: ")["input_ids"]


@dataclass
class Prefilled:
    row: int
    slots: torch.Tensor
    length: int


def prefill(runner: ModelRunner, pixels: torch.Tensor, ids: list[int]) -> Prefilled:
    """Images then text into the pool, the whole prompt bidirectional."""
    length = runner.vision.num_image_tokens * pixels.shape[0] + len(ids)
    row, slots, _logits = prefill_prompt(runner, pixels, ids, length)
    return Prefilled(row, slots, length)


def release(runner: ModelRunner, request: Prefilled) -> None:
    runner.req_to_token_pool.free(request.row)
    runner.kv_pool.allocator.free(request.slots)


def denoise_alone(runner: ModelRunner, request: Prefilled, x: torch.Tensor, state) -> torch.Tensor:
    for t in denoise_times(NUM_STEPS):
        v = runner.denoise([request.row], [request.length], x, torch.tensor([t]), state[None])
        x = euler_update(x, v, NUM_STEPS)
    return x


def runner_actions(runner: ModelRunner, case: Case, ids: list[int]) -> torch.Tensor:
    request = prefill(runner, case.present_pixels, ids)
    try:
        return denoise_alone(runner, request, noise(case.seed), case.state)[0]
    finally:
        release(runner, request)


@pytest.fixture(scope="module", params=["pi0", "pi05"])
def kind(request) -> str:
    return request.param


@cache
def runner_for(kind: str) -> ModelRunner:
    folder = pi0_model_path(kind, "bare")
    return ModelRunner(detect(folder), device="cpu", max_total_tokens=1024, progress=False)


@pytest.fixture(scope="module")
def runner(kind) -> ModelRunner:
    return runner_for(kind)


@pytest.fixture(scope="module")
def tokenizer(kind):
    return family_tokenizer(pi0_model_path(kind, "bare"))


def test_pi0_actions_and_prefix_kv_equal_transformers():
    folder = str(pi0_model_path("pi0", "bare"))
    runner, tokenizer, model = runner_for("pi0"), family_tokenizer(folder), ref.hf_pi0(folder)
    assert len(CASES) >= 12 and {c.present for c in CASES} == {(True, True), (True, False),
                                                               (False, True)}  # fmt: skip
    worst_actions = worst_kv = 0.0
    for case in CASES:
        ids = text_ids(tokenizer, "pi0", case)
        inputs = ref.hf_inputs(model, case.pixels, list(case.present), ids, case.masked_tokens)
        expected = ref.hf_sample(model, inputs, case.state, noise(case.seed))
        ours = runner_actions(runner, case, ids)
        assert ours.abs().max() > 0.5  # wide weights: a chunk far from zero
        worst_actions = max(worst_actions, float((ours - expected).abs().max()))
        request = prefill(runner, case.present_pixels, ids)
        kept = inputs.attention_mask[0].bool()
        for layer, (k, v) in enumerate(ref.hf_prefix_cache(model, inputs)):
            ours_k, ours_v = runner.kv_pool.get_kv(layer)
            worst_kv = max(worst_kv, float((ours_k[request.slots] - k[kept]).abs().max()),
                           float((ours_v[request.slots] - v[kept]).abs().max()))  # fmt: skip
        release(runner, request)
    assert worst_actions <= 1e-4, worst_actions
    assert worst_kv <= 1e-5, worst_kv


def test_the_spec_reference_in_pi0_mode_equals_transformers():
    """The cross-check that makes `SpecReference` an oracle for pi0.5: the shared parts (joint
    attention, masks, positions, Gemma blocks, time embedding, Euler) against transformers."""
    folder = str(pi0_model_path("pi0", "bare"))
    tokenizer, model = family_tokenizer(folder), ref.hf_pi0(folder)
    spec = ref.SpecReference(folder, "pi0")
    for case in CASES[:6]:
        ids = text_ids(tokenizer, "pi0", case)
        inputs = ref.hf_inputs(model, case.pixels, list(case.present), ids, case.masked_tokens)
        expected = ref.hf_sample(model, inputs, case.state, noise(case.seed))
        mine = spec.sample(case.pixels, list(case.present), ids, case.state, noise(case.seed)[0])
        torch.testing.assert_close(mine, expected, atol=1e-4, rtol=0)


def test_pi05_actions_equal_the_spec_reference():
    folder = str(pi0_model_path("pi05", "bare"))
    runner = runner_for("pi05")
    tokenizer, spec = family_tokenizer(folder), ref.SpecReference(folder, "pi05")
    worst = 0.0
    for case in CASES:
        ids = text_ids(tokenizer, "pi05", case)
        expected = spec.sample(case.pixels, list(case.present), ids, case.state,
                               noise(case.seed)[0])  # fmt: skip
        ours = runner_actions(runner, case, ids)
        assert ours.abs().max() > 0.5
        worst = max(worst, float((ours - expected).abs().max()))
    assert worst <= 1e-4, worst


def test_denoise_reads_the_pool_and_counts(runner, tokenizer, kind):
    case = CASES[0]
    before = runner.counters.__dict__.copy()
    request = prefill(runner, case.present_pixels, text_ids(tokenizer, kind, case))
    free = runner.kv_pool.allocator.available_size()
    buffers = runner.kv_pool.k_buffer + runner.kv_pool.v_buffer
    pool = [t.clone() for t in buffers]
    table = runner.req_to_token_pool.req_to_token.clone()
    denoise_alone(runner, request, noise(1), case.state)
    assert runner.kv_pool.allocator.available_size() == free
    assert all(torch.equal(a, b) for a, b in zip(pool, buffers, strict=True))
    assert torch.equal(table, runner.req_to_token_pool.req_to_token)
    after = runner.counters
    assert after.vlm_tokens - before["vlm_tokens"] == request.length  # the prefix, once
    assert after.expert_passes - before["expert_passes"] == NUM_STEPS
    assert after.expert_rows - before["expert_rows"] == NUM_STEPS
    release(runner, request)


def test_requests_batched_at_different_steps_equal_each_alone(runner, tokenizer, kind):
    """Four robots with their own prompts, prefix lengths, noise and state; request i joins at
    iteration i, so each batch mixes prefix lengths and times (as the scheduler batches)."""
    picked = [CASES[i] for i in (0, 1, 2, 7)]
    requests = [prefill(runner, c.present_pixels, text_ids(tokenizer, kind, c)) for c in picked]
    assert len({r.length for r in requests}) >= 3
    alone = [denoise_alone(runner, r, noise(c.seed), c.state)
             for r, c in zip(requests, picked, strict=True)]  # fmt: skip
    times = denoise_times(NUM_STEPS)
    x = [noise(c.seed) for c in picked]
    step = [-i for i in range(len(picked))]
    before = runner.counters.expert_passes
    while min(step) < NUM_STEPS:
        active = [i for i, s in enumerate(step) if 0 <= s < NUM_STEPS]
        if active:
            v = runner.denoise(
                [requests[i].row for i in active], [requests[i].length for i in active],
                torch.cat([x[i] for i in active]), torch.tensor([times[step[i]] for i in active]),
                torch.stack([picked[i].state for i in active]),
            )  # fmt: skip
            for j, i in enumerate(active):
                x[i] = euler_update(x[i], v[j : j + 1], NUM_STEPS)
        step = [s + 1 for s in step]
    assert runner.counters.expert_passes - before == NUM_STEPS + len(picked) - 1
    for ours, expected in zip(x, alone, strict=True):
        torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    for request in requests:
        release(runner, request)


def test_the_pi0_state_token_does_not_see_the_actions():
    folder = str(pi0_model_path("pi0", "bare"))
    runner = runner_for("pi0")
    case = CASES[0]
    request = prefill(runner, case.present_pixels, text_ids(family_tokenizer(folder), "pi0", case))
    outputs: list[torch.Tensor] = []
    hook = runner.head.expert.register_forward_hook(lambda _m, _i, out: outputs.append(out))
    for seed in (1, 2):
        runner.denoise([request.row], [request.length], noise(seed), torch.tensor([0.6]),
                       case.state[None])  # fmt: skip
    hook.remove()
    release(runner, request)
    first, second = outputs
    torch.testing.assert_close(first[:, 0], second[:, 0], atol=1e-6, rtol=0)  # the state token
    assert (first[:, 1:] - second[:, 1:]).abs().max() > 1e-2  # the actions do change
