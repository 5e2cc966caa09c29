"""The vision encoder and image-conditioned generation against transformers' own LLaVA.

The reference is `LlavaForConditionalGeneration` on the same folder, fed by the folder's own
`LlavaProcessor`. Our side plays the scheduler: the prompt's `<image>` placeholders become runs of
hash-derived pad ids (outside the vocabulary), `ModelRunner.encode_images` embeds our own
preprocessing of the images, and the prefill replaces the embeddings at those positions.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoProcessor, LlavaForConditionalGeneration

from tests.support.hf_reference import assert_same_greedy
from tests.support.images import random_rgb
from tests.support.tiny_checkpoints import make_llama, make_llava
from vla_frames.image_hash import image_hash, pad_ids_for_image
from vla_server.model.model_runner import ModelRunner
from vla_server.model.sampling import SamplingBatchInfo, SamplingParams
from vla_server.model.weight_loader import WeightLoadError
from vla_server.multimodal.preprocess import preprocess_image
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.policies.llava.demo import make_demo_model
from vla_server.policies.llava.vision import LlavaVisionEncoder
from vla_server.policies.registry import detect

FEATURE_ATOL = 1e-5
STEPS = 32
BUILDERS = {
    "clip-llama": make_llava,
    "clip-llama-original-layout": lambda: make_llava(original_layout=True),
    "siglip-qwen2": lambda: make_llava(text="qwen2", vision="siglip"),
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass
class Loaded:
    path: Path
    runner: ModelRunner
    hf: LlavaForConditionalGeneration
    processor: object


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """name -> Loaded, each built once per module."""
    loaded: dict[str, Loaded] = {}

    def get(name: str) -> Loaded:
        if name not in loaded:
            if name == "demo":
                path = make_demo_model(tmp_path_factory.mktemp("demo"))
            else:
                path = BUILDERS[name]()
            runner = ModelRunner(
                detect(path), max_total_tokens=1024, max_running_requests=2, progress=False
            )
            hf = LlavaForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
            loaded[name] = Loaded(path, runner, hf, AutoProcessor.from_pretrained(path))
        return loaded[name]

    return get


@torch.no_grad()
def reference_features(hf: LlavaForConditionalGeneration, pixels: torch.Tensor) -> torch.Tensor:
    return torch.stack(list(hf.get_image_features(pixel_values=pixels).pooler_output))


@pytest.mark.parametrize("name", [*BUILDERS, "demo"])
def test_features_match_get_image_features(checkpoint, name):
    m = checkpoint(name)
    encoder = LlavaVisionEncoder.from_folder(m.path, dtype=torch.float32, device="cpu")
    size = encoder.spec.image_size
    pixels = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(0))
    ours = encoder.encode(pixels)
    ref = reference_features(m.hf, pixels)
    assert len(ours) == 3 and ours[0].shape == (
        encoder.num_image_tokens,
        m.runner.config.hidden_size,
    )
    torch.testing.assert_close(torch.stack(ours), ref, atol=FEATURE_ATOL, rtol=0)
    # The runner's own encoder computes the same thing.
    torch.testing.assert_close(
        torch.stack(m.runner.encode_images(list(pixels))), ref, atol=FEATURE_ATOL, rtol=0
    )


def test_tower_is_cut_after_the_deepest_selected_layer(checkpoint):
    # CLIP checkpoint: 2 layers, vision_feature_layer -2; SigLIP: 3 layers, [1, -2], pooling head.
    clip = checkpoint("clip-llama").runner.vision
    siglip = checkpoint("siglip-qwen2").runner.vision
    assert len(clip.tower.encoder.layers) == 1
    assert len(siglip.tower.encoder.layers) == 2 and not hasattr(siglip.tower, "head")


def test_older_vision_model_layout_loads(checkpoint, tmp_path):
    """Pre-transformers-5 LLaVA checkpoints name the tower `vision_tower.vision_model.*`."""
    source = checkpoint("clip-llama-original-layout")
    folder = tmp_path / "old"
    shutil.copytree(source.path, folder)
    tensors = load_file(folder / "model.safetensors")
    renamed = {
        n.replace("vision_tower.", "vision_tower.vision_model.", 1): t for n, t in tensors.items()
    }
    assert any(n.startswith("vision_tower.vision_model.encoder.") for n in renamed)
    save_file(renamed, folder / "model.safetensors", metadata={"format": "pt"})
    encoder = LlavaVisionEncoder.from_folder(folder, dtype=torch.float32, device="cpu")
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    hf = LlavaForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    torch.testing.assert_close(
        torch.stack(encoder.encode(pixels)),
        reference_features(hf, pixels),
        atol=FEATURE_ATOL,
        rtol=0,
    )


PROMPTS = {
    1: "{img}\nWhat action should the robot take to pick up the red cube?",
    2: "left camera {img} right camera {img} move the arm towards the blue bowl then",
}


def expand_prompt(m: Loaded, text: str, hashes: list[int]) -> list[int]:
    """Each image token becomes the image's run of pad ids (what the scheduler does)."""
    runner = m.runner
    ids = m.processor.tokenizer(text)["input_ids"]
    image_ids = iter(hashes)
    expanded: list[int] = []
    for token in ids:
        if token == runner.config.image_token_id:
            expanded += pad_ids_for_image(
                next(image_ids), runner.vision.num_image_tokens, runner.vocab_size
            )
        else:
            expanded.append(token)
    assert next(image_ids, None) is None, "fewer placeholders than images"
    return expanded


def generate_ours(
    runner: ModelRunner, ids: list[int], embeds: torch.Tensor, steps: int
) -> list[int]:
    """Prefill with the image embeddings at the pad-id positions, then greedy decode steps."""
    row = runner.req_to_token_pool.alloc()
    mask = [token >= runner.vocab_size for token in ids]
    slots = runner.kv_pool.allocator.alloc(len(ids))
    batch = runner.build_forward_batch(
        [row], [0], [ids], slots, input_embeds=embeds, input_embeds_mask=mask
    )
    logits = runner.forward(batch).next_token_logits
    info = SamplingBatchInfo.build([SamplingParams(temperature=0.0)], runner.vocab_size, "cpu")
    tokens: list[int] = []
    for step in range(steps):
        tokens.append(int(runner.sample(logits, info).next_token_ids[0]))
        if step < steps - 1:
            slot = runner.kv_pool.allocator.alloc(1)
            batch = runner.build_forward_batch([row], [len(ids) + step], [[tokens[-1]]], slot)
            logits = runner.forward(batch).next_token_logits
    used = runner.req_to_token_pool.req_to_token[row, : len(ids) + steps - 1]
    runner.kv_pool.allocator.free(used.to(torch.int64))
    runner.req_to_token_pool.free(row)
    return tokens


@torch.no_grad()
def generate_reference(m: Loaded, inputs: dict, steps: int) -> tuple[list[int], torch.Tensor]:
    out = m.hf.generate(
        **inputs,  # input_ids, an explicit attention_mask, pixel_values
        max_new_tokens=steps,
        do_sample=False,
        eos_token_id=None,
        return_dict_in_generate=True,
        output_logits=True,
    )
    tokens = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    assert len(tokens) == steps, "reference stopped early"
    return tokens, torch.stack(out.logits)[:, 0].float()


@pytest.mark.parametrize(
    ("name", "n_images"),
    [("clip-llama", 1), ("clip-llama", 2), ("siglip-qwen2", 1), ("siglip-qwen2", 2), ("demo", 1)],
)
def test_greedy_generation_with_images_matches_transformers(checkpoint, name, n_images):
    m = checkpoint(name)
    size = m.runner.vision.spec.image_size
    # Not at the tower's size, so both sides resize (and CLIP's processor also crops).
    images = [random_rgb(size + 8 + 4 * i, size + 16, seed=10 + i) for i in range(n_images)]
    text = PROMPTS[n_images].format(img=m.processor.image_token)
    preprocess = PreprocessConfig.from_folder(m.path)
    hashes = [image_hash(image, preprocess.digest()) for image in images]
    ids = expand_prompt(m, text, hashes)
    inputs = m.processor(text=text, images=images, return_tensors="pt")
    ref_ids = inputs["input_ids"][0].tolist()
    image_token = m.runner.config.image_token_id
    # The same prompt as the processor's, except pad ids (never real tokens) at image positions.
    assert [image_token if t >= m.runner.vocab_size else t for t in ids] == ref_ids
    assert sum(t >= m.runner.vocab_size for t in ids) == n_images * m.runner.vision.num_image_tokens
    assert ids.count(image_token) == 0

    embeds = m.runner.encode_images([preprocess_image(image, preprocess) for image in images])
    ours = generate_ours(m.runner, ids, torch.cat(embeds), STEPS)
    ref_tokens, ref_logits = generate_reference(m, dict(inputs), STEPS)
    matched = assert_same_greedy(ours, ref_tokens, ref_logits, f"{name}, {n_images} image(s)")
    print(f"{name}, {n_images} image(s): {matched}/{STEPS} tokens identical before any near-tie")
    # The comparison means something only if the images steer the output.
    other = m.runner.encode_images([np.zeros((3, size, size), np.float32)] * n_images)
    assert generate_ours(m.runner, ids, torch.cat(other), STEPS) != ref_tokens


def test_text_only_checkpoint_has_no_vision():
    runner = ModelRunner(
        detect(make_llama()), max_total_tokens=64, max_running_requests=1, progress=False
    )
    assert runner.vision is None
    with pytest.raises(ValueError, match="no vision encoder"):
        runner.encode_images([np.zeros((3, 32, 32), np.float32)])


def edited_copy(source: Path, folder: Path, config=None, drop_tensor: str | None = None) -> Path:
    shutil.copytree(source, folder)
    if config is not None:
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**raw, **config}))
    if drop_tensor is not None:
        tensors = load_file(folder / "model.safetensors")
        del tensors[drop_tensor]
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_update_weights_from_disk_swaps_the_vision_encoder(tmp_path):
    old, new = make_llava(), make_llava(seed=5)
    runner = ModelRunner(detect(old), max_total_tokens=64, max_running_requests=1, progress=False)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    before = torch.stack(runner.encode_images(list(pixels)))
    embed_before = runner.model.embed_tokens.weight.clone()
    bad = [
        (
            edited_copy(new, tmp_path / "layer", config={"vision_feature_layer": -1}),
            "feature_layers",
        ),
        (
            edited_copy(
                new, tmp_path / "missing", drop_tensor="model.multi_modal_projector.linear_2.bias"
            ),
            "vision encoder: 1 missing tensor",
        ),
    ]
    for folder, message in bad:
        with pytest.raises(WeightLoadError, match=message):
            runner.update_weights(detect(folder))
        # Checked before anything was copied: decoder and vision weights are the old ones.
        assert torch.equal(runner.model.embed_tokens.weight, embed_before)
        assert torch.equal(torch.stack(runner.encode_images(list(pixels))), before)
    runner.update_weights(detect(new))
    hf_new = LlavaForConditionalGeneration.from_pretrained(new, dtype=torch.float32).eval()
    torch.testing.assert_close(
        torch.stack(runner.encode_images(list(pixels))),
        reference_features(hf_new, pixels),
        atol=FEATURE_ATOL,
        rtol=0,
    )
