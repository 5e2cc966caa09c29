"""The pi0-FAST model in the runner against transformers' PaliGemma on the tiny LeRobot-layout
checkpoint: both layouts load with no missing or unexpected tensor, greedy decoding equals
transformers' token for token with the last step's logits within 1e-4 (LeRobot's and openpi's
position conventions, both attention backends), and the prefix-LM property the radix rule
rests on: an image token's K/V depend on the prompt's last token."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support import pi0fast_reference as ref
from tests.support.families import family_tokenizer
from tests.support.images import random_rgb
from tests.support.paligemma_prefill import prefill
from vla_server.mem_cache.prefix_key import prefix_lm_key_head
from vla_server.model.model_runner import ModelRunner
from vla_server.model.weight_loader import WeightLoadError
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.policies.pi0fast.tiny import pi0fast_model_path
from vla_server.policies.pi_common.tiny_paligemma import IMAGE_SIZE
from vla_server.policies.registry import detect

FRAMES = [random_rgb(28, 28, seed=5), random_rgb(70, 40, seed=6)]


@pytest.fixture(scope="module")
def folder() -> str:
    return str(pi0fast_model_path("bare"))


@pytest.fixture(scope="module")
def runner(folder) -> ModelRunner:
    return ModelRunner(detect(folder), device="cpu", max_total_tokens=512, progress=False)


@pytest.fixture(scope="module")
def fast(folder) -> FastActionTokenizer:
    return detect(folder).actions(family_tokenizer(folder))


def _pixels() -> torch.Tensor:
    return torch.stack([ref.lerobot_pixels(f, IMAGE_SIZE, IMAGE_SIZE) for f in FRAMES])


def _greedy(runner, pixels, text_ids, tail, shift, fast, max_new) -> ref.Greedy:
    n = len(text_ids) + runner.vision.num_image_tokens * pixels.shape[0]
    row, slots, logits = prefill(runner, pixels, text_ids, n - tail, shift)
    allowed = fast.allowed_mask(runner.vocab_size)
    stops, tokens, length = set(fast.end_ids + fast.eos_ids), [], n
    all_slots = [slots]
    while True:
        token = int(logits.masked_fill(~allowed, float("-inf")).argmax())
        tokens.append(token)
        if token in stops or len(tokens) == max_new:
            break
        slot = runner.kv_pool.allocator.alloc(1)
        all_slots.append(slot)
        batch = runner.build_forward_batch(
            [row], [length], [[token]], slot, prefix_lm_lens=[n - tail], position_shifts=[shift]
        )
        logits, length = runner.forward(batch).next_token_logits[0], length + 1
    runner.req_to_token_pool.free(row)
    runner.kv_pool.allocator.free(torch.cat(all_slots))
    return ref.Greedy(tokens, logits)


@pytest.mark.parametrize("convention", ["lerobot", "openpi"])
def test_greedy_and_logits_equal_transformers(runner, fast, folder, convention):
    tokenizer, model = family_tokenizer(folder), ref.hf_paligemma(folder)
    tail = len(tokenizer("Action: ", add_special_tokens=False)["input_ids"])
    shift = 1 if convention == "openpi" else 0
    allowed = list(fast.fast_ids()) + list(fast.end_ids + fast.eos_ids)
    stops = set(fast.end_ids + fast.eos_ids)
    for instruction, state in [("Pick up the RED block", [0.1, 1.0, 0.2, 3.0]),
                               ("open the drawer", [-1.0, 2.0, -0.3, 2.5])]:  # fmt: skip
        ids = ref.prompt_ids(tokenizer, instruction, fast.state_bins(state), convention)
        expected = ref.greedy(model, _pixels(), ids, tail, shift, allowed, stops, 12)
        ours = _greedy(runner, _pixels(), ids, tail, shift, fast, 12)
        assert ours.tokens == expected.tokens
        torch.testing.assert_close(ours.last_logits, expected.last_logits, atol=1e-4, rtol=0)


def test_triton_backend_equals_transformers(folder, fast):
    pytest.importorskip("triton")
    runner = ModelRunner(
        detect(folder),
        device="cpu",
        max_total_tokens=256,
        attention_backend="triton",
        progress=False,
    )
    tokenizer, model = family_tokenizer(folder), ref.hf_paligemma(folder)
    ids = ref.prompt_ids(tokenizer, "stack the cup", fast.state_bins([0, 1, 0, 3]), "lerobot")
    tail = len(tokenizer("Action: ", add_special_tokens=False)["input_ids"])
    allowed = list(fast.fast_ids()) + list(fast.end_ids + fast.eos_ids)
    expected = ref.greedy(model, _pixels(), ids, tail, 0, allowed, set(), 3)
    ours = _greedy(runner, _pixels(), ids, tail, 0, fast, 3)
    assert ours.tokens == expected.tokens
    torch.testing.assert_close(ours.last_logits, expected.last_logits, atol=1e-4, rtol=0)


def test_the_last_prompt_token_changes_the_image_tokens_kv(runner, folder):
    """Why a partial radix match of a prefix-LM prompt is never reused."""
    tokenizer = family_tokenizer(folder)
    ids = tokenizer("Task: pick up the red block, State: 1 2 3 4;\n")["input_ids"]
    other = [*ids[:-1], tokenizer("Task: open", add_special_tokens=False)["input_ids"][-1]]
    assert other != ids
    n_img = 4 * len(FRAMES)
    kv = []
    for text in (ids, other):
        row, slots, _ = prefill(runner, _pixels(), text, n_img + len(text))
        kv.append([runner.kv_pool.get_kv(layer)[0][slots[:n_img]].clone() for layer in (0, 1)])
        runner.req_to_token_pool.free(row)
        runner.kv_pool.allocator.free(slots)
    assert torch.equal(kv[0][0], kv[1][0])  # layer 0: a token's own embedding only
    assert (kv[0][1] - kv[1][1]).abs().max() > 1e-3  # after attention: the whole prefix
    head = prefix_lm_key_head(ids, 0)
    assert head != prefix_lm_key_head(other, 0) and head == prefix_lm_key_head(list(ids), 0)
    assert head != prefix_lm_key_head(ids, 1) and head != prefix_lm_key_head(ids[:-1], 0)


def test_the_prefixed_layout_loads_and_computes_the_same(runner, folder):
    prefixed = ModelRunner(
        detect(pi0fast_model_path("prefixed")), device="cpu", max_total_tokens=128, progress=False
    )
    for mine, theirs in zip(runner.model.parameters(), prefixed.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(runner.vision.parameters(), prefixed.vision.parameters(), strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("change", ["extra", "missing"])
def test_a_foreign_or_missing_tensor_fails_the_load(folder, tmp_path, change):
    copy = tmp_path / "ckpt"
    shutil.copytree(folder, copy)
    tensors = load_file(str(copy / "model.safetensors"))
    if change == "extra":
        tensors["paligemma_with_expert.gemma_expert.lm_head.weight"] = torch.zeros(4, 4)
        named = "unexpected tensor 'paligemma_with_expert.gemma_expert"
    else:
        del tensors[next(k for k in tensors if "layers.1.mlp.down_proj" in k)]
        named = "missing tensor.*layers.1.mlp.down_proj"
    save_file(tensors, str(copy / "model.safetensors"))
    with pytest.raises(WeightLoadError, match=named):
        ModelRunner(detect(copy), device="cpu", max_total_tokens=64, progress=False)
