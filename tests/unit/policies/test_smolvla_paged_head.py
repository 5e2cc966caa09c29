"""SmolVLA's engine half against its model half (`SmolVLA`), on the tiny folder, in one process:

* the action head over prefixes in the paged KV pool (`PagedActionHead.velocity`) equals the
  model half's `velocity` over its own `prefix_kv`, for 3 rows of different prefix lengths at
  different times, batched and each alone, with the prefixes' slots scattered in the pool;
* the engine's decoder (`ModelRunner`, the family's decoder config and layout), prefilling the
  engine's prompt (image features from the family's vision encoder, the text ids, the state
  token's embedding from the head, `prefix_lm_len` = length - 1), writes the model half's
  post-RoPE K/V of every layer into the pool;
* the engine loads the bare and mixed-dtype folders as the model half does, and refuses a
  folder with a missing or foreign tensor (expert, decoder, vision, elsewhere) naming it, and
  a setting it does not serve (`add_image_special_tokens`) naming the setting.
"""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support import smolvla_cases as sc
from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.model_runner import ModelRunner
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.policies.registry import detect
from vla_server.policies.smolvla import PrefixKV
from vla_server.policies.smolvla.family import SmolVLAFamily
from vla_server.policies.smolvla.tiny import CAMERAS, TinySpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def three_observations():
    """Three prefixes of different lengths: 2 cameras, 1 camera, other text and state."""
    return [
        sc.observation(CAMERAS, sc.INSTRUCTIONS[1], sc.STATES[0], seed=1),
        sc.observation(CAMERAS[:1], sc.INSTRUCTIONS[0], sc.STATES[1], seed=2),
        sc.observation(CAMERAS[1:], "push the cube", sc.STATES[0], seed=3),
    ]


def family() -> SmolVLAFamily:
    found = detect(sc.tiny_folder())
    assert isinstance(found, SmolVLAFamily)
    return found


def paged(prefixes: list[PrefixKV]) -> PagedPrefix:
    """The prefixes written into a KV pool at scattered slots, one request row each."""
    c = sc.policy().model.config
    total = sum(int(p.lens[0]) for p in prefixes)
    pool = TokenToKVPool(total + 8, c.text.num_layers, c.text.num_kv_heads, c.text.head_dim,
                         torch.float32, "cpu")  # fmt: skip
    rows = ReqToTokenPool(4, 64, "cpu")
    slots = torch.randperm(total + 7, generator=torch.Generator().manual_seed(5))[:total] + 1
    start = 0
    for i, prefix in enumerate(prefixes):
        n = int(prefix.lens[0])
        loc = slots[start : start + n]
        rows.req_to_token[i, :n] = loc.to(rows.req_to_token.dtype)
        for layer in range(prefix.num_layers):
            pool.set_kv(layer, loc, *prefix.layer_tokens(0, layer))
        start += n
    return PagedPrefix.build(rows, pool, [0, 1, 2], [int(p.lens[0]) for p in prefixes])


def test_velocity_over_the_paged_prefix_equals_the_model_half():
    policy = sc.policy()
    model = policy.model
    prefixes = [model.prefix_kv(policy.processor(o)) for o in three_observations()]
    assert len({int(p.lens[0]) for p in prefixes}) == 3
    head = family().action_head(None, torch.float32, torch.device("cpu"), 64)
    head.load_weights(head.plan_weights(sc.tiny_folder()), progress=False)
    x = torch.randn(3, 10, 32, generator=torch.Generator().manual_seed(0))
    times = torch.tensor([1.0, 0.7, 0.1])
    ours = head.velocity(paged(prefixes), x, times, None)
    theirs = model.velocity(model.expert_context(PrefixKV.batch(prefixes)), x, times)
    assert ours.dtype == torch.float32 and ours.abs().max() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    for i, prefix in enumerate(prefixes):
        alone = model.velocity(model.expert_context(prefix), x[i : i + 1], times[i : i + 1])
        torch.testing.assert_close(ours[i : i + 1], alone, atol=1e-5, rtol=0)
    state = torch.randn(2, 32, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(head.embed_state(state), model.prefix.state_proj(state))


def test_the_engines_prefill_writes_the_model_halfs_prefix_kv():
    policy = sc.policy()
    runner = ModelRunner(family(), device="cpu", dtype="float32", max_total_tokens=256,
                         max_running_requests=4, progress=False)  # fmt: skip
    for n, obs in enumerate(three_observations()):
        inputs = policy.processor(obs)
        expected = policy.model.prefix_kv(inputs)
        images = [inputs.images[0, s] for s in range(inputs.images.shape[1])]
        features = runner.encode_images([im.numpy() for im in images])
        text = inputs.tokens[0, inputs.token_mask[0]].tolist()
        ids = [runner.vocab_size + 7] * sum(len(f) for f in features) + text + [0]
        embeds = torch.zeros(len(ids), runner.config.hidden_size)
        embeds[: len(ids) - len(text) - 1] = torch.cat(features)
        embeds[-1] = runner.embed_state(inputs.state)[0]
        mask = torch.zeros(len(ids), dtype=torch.bool)
        mask[: len(ids) - len(text) - 1] = mask[-1] = True
        row = runner.req_to_token_pool.alloc()
        slots = runner.kv_pool.allocator.alloc(len(ids))
        fb = runner.build_forward_batch(
            [row], [0], [ids], slots, input_embeds=embeds, input_embeds_mask=mask,
            prefix_lm_lens=[len(ids) - 1],
        )  # fmt: skip
        runner.forward(fb, next_token_logits=False)
        assert len(ids) == int(expected.lens[0]), n
        for layer in range(expected.num_layers):
            k, v = runner.kv_pool.get_kv(layer)
            want_k, want_v = expected.layer_tokens(0, layer)
            torch.testing.assert_close(k[slots], want_k, atol=1e-5, rtol=0)
            torch.testing.assert_close(v[slots], want_v, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["bare", "mixed"])
def test_the_engine_loads_bare_and_mixed_dtype_folders_as_the_model_half(layout):
    spec = TinySpec(prefixed=False) if layout == "bare" else TinySpec(mixed_dtypes=True)
    folder = sc.tiny_folder(spec)
    runner = ModelRunner(detect(folder), device="cpu", dtype="float32", max_total_tokens=64,
                         max_running_requests=2, progress=False)  # fmt: skip
    model = sc.policy(spec).model
    assert runner.config.num_layers == model.config.text.num_layers == 4
    ours = runner.model.layers[3].self_attn.o_proj.weight
    assert torch.equal(ours, model.prefix.layers[3].self_attn.o_proj.weight)
    head = runner.head.expert.layers[1].self_attn.k_proj.weight
    assert torch.equal(head, model.expert.layers[1].self_attn.k_proj.weight)


@pytest.mark.parametrize(
    ("mutation", "named"),
    [
        ("drop", "model.vlm_with_expert.lm_expert.layers.3.mlp.up_proj.weight"),
        ("drop", "model.vlm_with_expert.vlm.model.text_model.layers.2.mlp.up_proj.weight"),
        ("drop", "model.vlm_with_expert.vlm.model.vision_model.post_layernorm.bias"),
        ("add", "model.vlm_with_expert.lm_expert.layers.0.self_attn.extra.weight"),
        ("add", "model.vlm_with_expert.vlm.model.text_model.layers.4.mlp.up_proj.weight"),
        ("add", "model.vlm_with_expert.vlm.model.vision_model.extra.weight"),
        ("add", "model.some_other_head.weight"),
    ],
)
def test_the_engine_refuses_a_mutated_folder_naming_the_tensor(tmp_path, mutation, named):
    folder = shutil.copytree(sc.tiny_folder(), tmp_path / "mutated")
    tensors = load_file(folder / "model.safetensors")
    if mutation == "drop":
        del tensors[named]
    else:
        tensors[named] = torch.zeros(4, 4)
    save_file(tensors, folder / "model.safetensors")
    short = named.removeprefix("model.").split("vlm.model.", 1)[-1].removeprefix("text_model.")
    with pytest.raises(ValueError, match=re.escape(short)):
        ModelRunner(detect(folder), device="cpu", dtype="float32", max_total_tokens=64,
                    max_running_requests=2, progress=False)  # fmt: skip


def test_a_setting_the_engine_does_not_serve_stops_detection_naming_it():
    folder = sc.tiny_folder(TinySpec(add_image_special_tokens=True))
    with pytest.raises(NotImplementedError, match="add_image_special_tokens"):
        detect(folder)
