"""`--image-backend torch` served: greedy generation with images equals transformers' own LLaVA
fed with pixel values from its torchvision backend's arithmetic (spelled out with plain torch ops
in `tests/support/torchvision_backend.py`), and the node reports that backend's preprocess digest,
under which the documented image hash names its frames."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.support.hf_reference import HFLlava, assert_same_greedy
from tests.support.images import image_payload, random_rgb, smooth_rgb
from tests.support.server import run_server
from tests.support.tiny_checkpoints import make_llava
from tests.support.torchvision_backend import torchvision_backend
from vla_frames.image_hash import format_mm_hash, image_hash
from vla_server.multimodal.preprocess_config import PreprocessConfig

NEW_TOKENS = 16
# Larger than the tower's 32x32 on both sides, so the resize shrinks them; CLIP also crops.
IMAGES = [random_rgb(57, 75, seed=1), smooth_rgb(96, 80), random_rgb(120, 64, seed=2)]
PROMPT = "{img}\nWhat action should the robot take to pick up the red cube?"


@pytest.fixture(scope="module")
def checkpoint():
    path = make_llava(text="llama", vision="clip")
    return path, dataclasses.replace(PreprocessConfig.from_folder(path), resize_backend="torch")


def test_greedy_with_the_torch_backend_matches_transformers(checkpoint, tmp_path):
    path, cfg = checkpoint
    hf = HFLlava(path)
    text = PROMPT.format(img=hf.processor.image_token)
    refs = [
        hf.generate_text(
            text,
            [image],
            NEW_TOKENS,
            stop_at_eos=False,
            pixel_values=torch.from_numpy(torchvision_backend(image, cfg))[None],
        )
        for image in IMAGES
    ]
    greedy = {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    with run_server(path, tmp_path, "--image-backend", "torch") as server:
        client = server.client()
        digest = client.get("/get_server_info").json()["mm"]["preprocess_digest"]
        outs = []
        for image, form in zip(IMAGES, ["png", "raw", "data_url"], strict=True):
            body = {
                "text": text,
                "image_data": [image_payload(image, form)],
                "sampling_params": greedy,
            }
            r = client.post("/generate", json=body)
            assert r.status_code == 200, r.text
            outs.append(r.json())
        # The documented hash under the torch digest names the first frame: a prefix-cache hit.
        hashed = format_mm_hash(image_hash(IMAGES[0], cfg.digest()))
        payload = [image_payload(IMAGES[0], "raw")]
        body = {
            "text": text,
            "image_data": payload,
            "mm_hashes": [hashed],
            "sampling_params": greedy,
        }
        again = client.post("/generate", json=body).json()
    assert digest == cfg.digest().hex()
    for i, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        assert_same_greedy(out["output_ids"], ref.tokens, ref.logits, f"image {i}")
    assert again["output_ids"] == outs[0]["output_ids"]
    assert again["meta_info"]["cached_tokens"] >= refs[0].prompt_len - 1
    assert outs[0]["output_ids"] != outs[1]["output_ids"], "the image must steer the output"
