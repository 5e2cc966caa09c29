"""The embedded demo checkpoint, checked through transformers' own loaders and model."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoProcessor, AutoTokenizer, LlavaForConditionalGeneration

from vla_server.policies.llava import demo
from vla_server.policies.llava.demo import demo_model_path, make_demo_model

PROMPTS = ("pick up the red block", "open the drawer", "push the blue cup to the left")


def _offline(mp: pytest.MonkeyPatch) -> None:
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    def no_network(*args: object, **kwargs: object) -> None:
        raise OSError("network access during an offline load")

    mp.setattr(socket.socket, "connect", no_network)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_model(tmp_path_factory.mktemp("demo") / "ckpt")


@pytest.fixture(scope="module")
def loaded(demo_dir: Path) -> tuple[LlavaForConditionalGeneration, object]:
    with pytest.MonkeyPatch.context() as mp:
        _offline(mp)
        model = LlavaForConditionalGeneration.from_pretrained(demo_dir).eval()
        processor = AutoProcessor.from_pretrained(demo_dir)
    return model, processor


def _images() -> list[Image.Image]:
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    return [Image.fromarray(noise), Image.new("RGB", (300, 200), (200, 30, 30))]


def _user_turn(text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def _greedy(loaded: tuple, image: Image.Image, text: str) -> tuple[list[int], list[float]]:
    model, processor = loaded
    prompt = processor.apply_chat_template(_user_turn(text), add_generation_prompt=True)
    inputs = processor(images=image, text=prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=8,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
        )
    new_tokens = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    top2 = [scores[0].topk(2).values for scores in out.scores]
    return new_tokens, [float(t[0] - t[1]) for t in top2]


def test_two_builds_in_different_processes_are_byte_identical(demo_dir: Path, tmp_path: Path):
    other = tmp_path / "again"
    code = (
        "import sys; from vla_server.policies.llava.demo import make_demo_model as m; "
        "m(sys.argv[1])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(other)], check=True, env=env)
    names = sorted(p.name for p in demo_dir.iterdir())
    assert names == sorted(p.name for p in other.iterdir())
    assert {"model.safetensors", "tokenizer.json", "action_tokenizer.json"} <= set(names)
    for name in names:
        assert (demo_dir / name).read_bytes() == (other / name).read_bytes(), name


def test_loads_offline_and_generates_eight_tokens(demo_dir: Path, loaded: tuple):
    model, processor = loaded
    config = json.loads((demo_dir / "config.json").read_text())
    vision = config["vision_config"]
    n_image_tokens = (vision["image_size"] // vision["patch_size"]) ** 2  # "full": every patch
    prompt = processor.apply_chat_template(_user_turn("stack the lid"), add_generation_prompt=True)
    inputs = processor(images=_images()[0], text=prompt, return_tensors="pt")
    assert inputs["pixel_values"].shape == (1, 3, 224, 224)
    assert int((inputs["input_ids"] == config["image_token_index"]).sum()) == n_image_tokens == 196
    tokens, _ = _greedy(loaded, _images()[0], "stack the lid")
    assert len(tokens) == 8
    assert all(0 <= t < len(processor.tokenizer) for t in tokens)


def test_greedy_output_depends_on_prompt_and_image(loaded: tuple):
    noise, red = _images()
    runs = [_greedy(loaded, noise, text) for text in PROMPTS]
    runs.append(_greedy(loaded, red, PROMPTS[0]))
    assert len({tuple(tokens) for tokens, _ in runs}) == len(runs)
    # fp32 rounding is ~1e-5 here: the top-2 gap must stay well above it
    assert min(m for _, margins in runs for m in margins) > 1e-3


def test_action_bins_are_the_last_tokenizer_ids_and_vocab_is_padded(demo_dir: Path):
    tokenizer = AutoTokenizer.from_pretrained(demo_dir)
    n_tokens = len(tokenizer)
    bins = [tokenizer.convert_tokens_to_ids(f"<act_{k}>") for k in range(256)]
    assert sorted(bins) == list(range(n_tokens - 256, n_tokens))
    assert bins[0] == n_tokens - 1  # OpenVLA: bin index = V - id - 1
    vocab_size = json.loads((demo_dir / "config.json").read_text())["text_config"]["vocab_size"]
    assert vocab_size % 64 == 0 and vocab_size > n_tokens
    assert tokenizer.decode(bins[:3]) == "<act_0><act_1><act_2>"
    text = "place the carrot into the sink"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) < len(text) // 2 and tokenizer.decode(ids) == text  # BPE merges were learned
    spec = json.loads((demo_dir / "action_tokenizer.json").read_text())
    assert (spec["n_bins"], spec["action_dim"]) == (256, 7)
    assert spec["bin_token_ids"] == {"first": n_tokens - 256}
    for stats in spec["norm_stats"].values():
        assert [len(v) for v in stats["action"].values()] == [7, 7, 7]


def test_chat_template_renders_image_parts_as_image_token(loaded: tuple):
    _, processor = loaded
    messages = [
        {"role": "system", "content": "be careful"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:,"}},
                {"type": "text", "text": "open the drawer"},
            ],
        },
    ]
    rendered = processor.apply_chat_template(messages, add_generation_prompt=True)
    assert rendered == (
        "<|bos|><|im_start|>system\nbe careful<|im_end|>\n"
        "<|im_start|>user\n<image>open the drawer<|im_end|>\n<|im_start|>assistant\n"
    )
    assert processor.apply_chat_template(_user_turn("x")).count("<image>") == 1


def test_cache_builds_once_under_a_versioned_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = demo_model_path(tmp_path)
    assert path.parent == tmp_path and path.name.startswith("demo-vla-v")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary folder left
    assert (path / "model.safetensors").is_file()

    def no_rebuild(out_dir: Path) -> Path:
        raise AssertionError("rebuilt a cached checkpoint")

    monkeypatch.setattr(demo, "make_demo_model", no_rebuild)
    assert demo_model_path(tmp_path) == path
    monkeypatch.setenv("VLA_SERVER_CACHE", str(tmp_path))
    assert demo_model_path() == path


def test_cache_race_keeps_the_winners_copy(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    target = tmp_path / demo.DEMO_NAME

    def slow_build(out_dir: Path) -> Path:
        (out_dir / "partial").write_text("loser")
        shutil.copytree(demo_dir, target)  # another process finishes first
        return out_dir

    monkeypatch.setattr(demo, "make_demo_model", slow_build)
    assert demo_model_path(tmp_path) == target
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in demo_dir.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
