"""Image-conditioned greedy generation through the HTTP server equals transformers' own LLaVA.

For two tiny checkpoints written with transformers (CLIP + Llama, SigLIP + Qwen2 with GQA), six
requests (three with one image, three with two) are sent concurrently to `/generate` with
`image_data` and `<image>` placeholders (raw text and the processor's chat template, images as
base64 PNG, data URL and raw pixels). Each must produce the same 32 greedy tokens as
`LlavaForConditionalGeneration.generate` fed by the checkpoint's own processor with an explicit
attention mask; a divergence is excused only where the reference's top-2 logit gap is < 1e-3.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.support.hf_reference import TIE_GAP, HFLlava, assert_same_greedy, greedy_ids
from tests.support.images import image_payload, random_rgb
from tests.support.server import run_server
from tests.support.tiny_checkpoints import make_llava

NEW_TOKENS = 32
CHECKPOINTS = {
    "clip-llama": {"text": "llama", "vision": "clip"},
    "siglip-qwen2-gqa": {"text": "qwen2", "vision": "siglip"},
}


@dataclass
class Case:
    text: str | None  # None: built with the processor's chat template from `chat`
    chat: str
    forms: list[str]  # one wire form per image
    seed: int

    def images(self) -> list[np.ndarray]:
        # Never the tower's 32x32, so both sides resize (CLIP's processor also crops).
        return [
            random_rgb(36 + 5 * i + self.seed % 7, 44 + 3 * i, seed=self.seed + i)
            for i in range(len(self.forms))
        ]

    def prompt(self, processor: Any) -> str:
        if self.text is not None:
            return self.text.format(img=processor.image_token)
        parts = [{"type": "image"} for _ in self.forms] + [{"type": "text", "text": self.chat}]
        messages = [{"role": "user", "content": parts}]
        return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


CASES = [
    Case("{img}\nWhat action should the robot take to pick up the red cube?", "", ["png"], 10),
    # Same text, another image: the outputs must differ, or images would not matter.
    Case("{img}\nWhat action should the robot take to pick up the red cube?", "", ["data_url"], 20),
    Case(None, "move the arm to the left of the bowl", ["raw"], 30),
    Case(
        "left camera {img} right camera {img} move the arm towards the bowl", "", ["png", "raw"], 40
    ),
    Case(None, "stack the green block on the plate", ["data_url", "png"], 50),
    Case("{img}{img} grasp the ball and lift it slowly", "", ["raw", "data_url"], 60),
]


async def serve_all(server: Any, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with server.async_client() as client:

        async def one(body: dict[str, Any]) -> dict[str, Any]:
            r = await client.post("/generate", json=body)
            assert r.status_code == 200, r.text
            return r.json()

        return await asyncio.gather(*(one(b) for b in bodies))


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_greedy_with_images_matches_transformers(name, tmp_path):
    path = make_llava(**CHECKPOINTS[name])
    hf = HFLlava(path)
    texts = [case.prompt(hf.processor) for case in CASES]
    images = [case.images() for case in CASES]
    refs = [
        hf.generate_text(t, ims, NEW_TOKENS, stop_at_eos=False)
        for t, ims in zip(texts, images, strict=True)
    ]
    assert all(len(ref.tokens) == NEW_TOKENS for ref in refs), "the reference stopped early"
    bodies = [
        {
            "text": text,
            "image_data": [image_payload(im, f) for im, f in zip(ims, case.forms, strict=True)],
            "sampling_params": {
                "max_new_tokens": NEW_TOKENS,
                "temperature": 0,
                "ignore_eos": True,
            },
        }
        for case, text, ims in zip(CASES, texts, images, strict=True)
    ]
    # A placeholder without an image is an ordinary token (SGLang's and transformers' reading;
    # random-token benchmarks produce such prompts).
    no_image = f"a prompt that writes {hf.processor.image_token} but sends no image"
    no_image_ids = hf.processor.tokenizer(no_image)["input_ids"]
    no_image_ref = greedy_ids(hf.model, no_image_ids, NEW_TOKENS)
    greedy = {"max_new_tokens": NEW_TOKENS, "temperature": 0}  # both stop at EOS
    with run_server(
        path, tmp_path, "--max-running-requests", "8", "--max-total-tokens", "4096"
    ) as server:
        outs = asyncio.run(serve_all(server, bodies))
        (text_only,) = asyncio.run(
            serve_all(server, [{"text": no_image, "sampling_params": greedy}])
        )
    assert text_only["meta_info"]["prompt_tokens"] == len(no_image_ids)
    assert text_only["output_ids"] == no_image_ref, "a placeholder without an image"
    lines = []
    for i, (case, ref, out) in enumerate(zip(CASES, refs, outs, strict=True)):
        label = f"{name} request {i} ({len(case.forms)} image(s), {'+'.join(case.forms)})"
        # The server's expansion has as many positions as the processor's image tokens.
        assert out["meta_info"]["prompt_tokens"] == ref.prompt_len, label
        matched = assert_same_greedy(out["output_ids"], ref.tokens, ref.logits, label)
        lines.append(
            f"{label}: {matched}/{NEW_TOKENS} identical"
            + ("" if matched == NEW_TOKENS else f" (then a near-tie, top-2 gap < {TIE_GAP})")
        )
    assert outs[0]["output_ids"] != outs[1]["output_ids"], "the image must steer the output"
    print("\n".join(lines))
