"""SmolVLA's prefix: per-layer K/V against transformers' own SmolVLM (Idefics3 family) classes,
truncated to `num_vlm_layers` and fed LeRobot's prefix (scaled image and text embeddings, the
state token, the big_vision mask as a 4D mask, positions counting valid tokens, RoPE base
10000); and the prefix's rules: images, masks, cameras, tokens."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoConfig, DynamicCache, SmolVLMForConditionalGeneration

from tests.support import smolvla_cases as sc
from vla_server.policies.smolvla.images import resize_with_pad
from vla_server.policies.smolvla.prefix import PrefixInputs
from vla_server.policies.smolvla.processor import Observation
from vla_server.policies.smolvla.tiny import CAMERAS, TinySpec
from vla_server.policies.smolvla.vision import pixel_shuffle

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VLM = "model.vlm_with_expert.vlm."


def transformers_smolvlm(spec: TinySpec) -> SmolVLMForConditionalGeneration:
    """The backbone as transformers builds it, with the checkpoint's VLM weights (strict)."""
    folder = sc.tiny_folder(spec)
    config = AutoConfig.from_pretrained(folder / "vlm")
    config.text_config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    config._attn_implementation = "eager"
    config.text_config._attn_implementation = "eager"
    config.vision_config._attn_implementation = "eager"
    model = SmolVLMForConditionalGeneration(config).eval()
    text = model.model.text_model
    text.layers = text.layers[: json.loads((folder / "config.json").read_text())["num_vlm_layers"]]
    tensors = load_file(folder / "model.safetensors")
    state = {k.removeprefix(VLM): v.float() for k, v in tensors.items() if k.startswith(VLM)}
    model.load_state_dict(state, strict=True)
    return model


def transformers_prefix_kv(model, inputs: PrefixInputs, spec: TinySpec):
    """LeRobot's prefix through transformers' layers -> (cache, pad mask)."""
    w = load_file(sc.tiny_folder(spec) / "model.safetensors")
    width = model.config.text_config.hidden_size
    embeds, pads = [], []
    rows = inputs.tokens.shape[0]

    def special(ids: list[int]) -> None:  # unscaled, always valid
        embeds.append(model.model.text_model.embed_tokens(torch.tensor([ids] * rows)))
        pads.append(torch.ones(rows, len(ids), dtype=torch.bool))

    for slot in range(inputs.images.shape[1]):
        if spec.add_image_special_tokens:
            special([3, 5])  # <fake_token_around_image> <global-img> in the tiny vocabulary
        pixels = inputs.images[:, slot]
        hidden = model.model.vision_model(pixel_values=pixels).last_hidden_state
        embeds.append(model.model.connector(hidden) * math.sqrt(width))
        pads.append(inputs.image_masks[:, slot, None].expand(-1, embeds[-1].shape[1]))
        if spec.add_image_special_tokens:
            special([3])
    embeds.append(model.model.text_model.embed_tokens(inputs.tokens) * math.sqrt(width))
    pads.append(inputs.token_mask)
    state = F.linear(inputs.state, w["model.state_proj.weight"], w["model.state_proj.bias"])
    embeds.append(state[:, None])
    pads.append(torch.ones_like(inputs.token_mask[:, :1]))
    pad = torch.cat(pads, dim=1)
    ar = torch.zeros_like(pad, dtype=torch.long)
    ar[:, -1] = 1
    cum = ar.cumsum(1)
    allowed = (cum[:, None, :] <= cum[:, :, None]) & pad[:, None, :] & pad[:, :, None]
    mask = torch.where(allowed[:, None], 0.0, torch.finfo(torch.float32).min)
    cache = DynamicCache()
    model.model.text_model(
        inputs_embeds=torch.cat(embeds, dim=1),
        attention_mask=mask,
        position_ids=pad.long().cumsum(1) - 1,
        cache=cache,
        use_cache=True,
    )
    return cache, pad


def batch_of_two(cameras: tuple[str, ...]) -> Observation:
    imgs = sc.images(cameras, seed=5, rows=2)
    return Observation(imgs, torch.tensor(sc.STATES), list(sc.INSTRUCTIONS))


CASES = {
    "two cameras": (TinySpec(), CAMERAS),
    "camera 2 only": (TinySpec(), CAMERAS[1:]),
    "empty camera slot": (TinySpec(empty_cameras=1), CAMERAS[:1]),
    "image tokens": (TinySpec(add_image_special_tokens=True, empty_cameras=1), CAMERAS[:1]),
}


@pytest.mark.parametrize("case", CASES)
def test_prefix_kv_equals_transformers_smolvlm(case):
    spec, cameras = CASES[case]
    policy = sc.policy(spec)
    inputs = policy.processor(batch_of_two(cameras))
    ours = policy.model.prefix_kv(inputs)
    with torch.no_grad():
        cache, pad = transformers_prefix_kv(transformers_smolvlm(spec), inputs, spec)
    assert ours.num_layers == len(cache.layers) == 4
    assert torch.equal(ours.lens, pad.sum(1))
    for layer in range(ours.num_layers):
        for row in range(2):
            k, v = ours.layer_tokens(row, layer)
            hf_k = cache.layers[layer].keys[row].transpose(0, 1)[pad[row]]
            hf_v = cache.layers[layer].values[row].transpose(0, 1)[pad[row]]
            torch.testing.assert_close(k, hf_k, atol=1e-5, rtol=0)
            torch.testing.assert_close(v, hf_v, atol=1e-5, rtol=0)


def test_vision_and_connector_equal_transformers():
    model = transformers_smolvlm(TinySpec())
    ours = sc.policy().model.prefix
    pixels = torch.rand(3, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        hidden = model.model.vision_model(pixel_values=pixels).last_hidden_state
        torch.testing.assert_close(ours.vision(pixels), hidden, atol=1e-5, rtol=0)
        theirs = model.model.connector(hidden) * math.sqrt(64)
        # x sqrt(64) = 8: values near 10, so the float32 rounding is relative
        torch.testing.assert_close(ours.embed_image(pixels), theirs, atol=1e-5, rtol=1e-5)


def test_pixel_shuffle_index_map():
    """Patch (r, c) of an n x n grid -> token (r // s) * (n / s) + c // s, channels from
    ((r % s) * s + c % s) * width (the facts note's map), on a grid whose values name them."""
    n, s, width = 8, 2, 3
    r, c, ch = torch.meshgrid(torch.arange(n), torch.arange(n), torch.arange(width), indexing="ij")
    grid = (r * 100 + c * 10 + ch).reshape(1, n * n, width).float()
    out = pixel_shuffle(grid, s)
    assert out.shape == (1, (n // s) ** 2, s * s * width)
    for row, col, channel in ((0, 0, 0), (3, 6, 2), (7, 7, 1), (5, 2, 0)):
        token = (row // s) * (n // s) + col // s
        slot = ((row % s) * s + col % s) * width + channel
        assert out[0, token, slot] == row * 100 + col * 10 + channel


def test_resize_with_pad_pads_left_and_top_and_leaves_the_target_size_alone():
    image = torch.rand(1, 3, 48, 64) * 0.5 + 0.5
    out = resize_with_pad(image, 32, 32)
    assert out.shape == (1, 3, 32, 32)
    assert torch.all(out[..., :8, :] == 0) and torch.all(out[..., 8:, :] > 0)  # 24 rows, top padded
    tall = resize_with_pad(torch.rand(1, 3, 40, 30) + 1, 32, 32)
    assert torch.all(tall[..., :, :8] == 0) and torch.all(tall[..., :, 8:] > 0)  # 24 columns
    same = torch.rand(2, 3, 32, 32)
    assert resize_with_pad(same, 32, 32) is same
    inputs = sc.policy().processor(sc.observation(CAMERAS[:1], "go", sc.STATES[0]))
    assert torch.all(inputs.images[0, 0, :, :8] == -1)  # padding is -1 after x * 2 - 1


def test_a_state_change_leaves_image_and_text_kv_unchanged():
    policy = sc.policy()
    kvs = [
        policy.model.prefix_kv(policy.processor(sc.observation(CAMERAS, sc.INSTRUCTIONS[0], s)))
        for s in sc.STATES
    ]
    for layer in range(4):
        a, b = kvs[0].keys[layer][0], kvs[1].keys[layer][0]
        assert torch.equal(a[:-1], b[:-1])  # images and text never see the state token
        assert not torch.allclose(a[-1], b[-1])


def test_a_missing_camera_shrinks_the_prefix_and_an_empty_slot_changes_nothing():
    obs = [
        sc.observation(cams, sc.INSTRUCTIONS[0], sc.STATES[0]) for cams in (CAMERAS, CAMERAS[:1])
    ]
    plain, empty = sc.policy(TinySpec()), sc.policy(TinySpec(empty_cameras=1))  # same weights
    both, one = (plain.model.prefix_kv(plain.processor(o)) for o in obs)
    assert int(both.lens[0]) - int(one.lens[0]) == 16  # one image's tokens
    inputs = empty.processor(obs[1])
    assert inputs.images.shape[1] == 2 and inputs.image_masks.tolist() == [[True, False]]
    assert torch.all(inputs.images[:, 1] == -1)
    slot = empty.model.prefix_kv(inputs)
    for layer in range(4):
        torch.testing.assert_close(slot.keys[layer], one.keys[layer], atol=1e-6, rtol=0)


def test_tokens_get_a_newline_and_right_padding_to_max_length():
    processor = sc.policy().processor
    ids, mask = processor.tokenize(["pick up the red block", "open the drawer\n"])
    assert ids.shape == mask.shape == (2, 16) and mask.dtype == torch.bool
    newline = processor.tokenizer.convert_tokens_to_ids("Ċ")
    for row in range(2):
        n = int(mask[row].sum())
        assert ids[row, n - 1] == newline
        assert torch.all(ids[row, n:] == 2)  # <|im_end|> pads
        assert processor.tokenizer.bos_token_id not in ids[row, :n].tolist()
    long_ids, long_mask = processor.tokenize([sc.INSTRUCTIONS[1]])
    assert long_ids.shape == (1, 16) and bool(long_mask.all())  # truncated
