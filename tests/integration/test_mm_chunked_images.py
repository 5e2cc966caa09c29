"""Images whose positions a chunked prefill splits over several forwards, on the demo VLA.

With `--chunked-prefill-size 64` and 196 positions per image, every image of a two-camera prompt
spans chunk boundaries (and one chunk holds the end of the first and the start of the second).
Each image must still be resolved once per request: a new pair counts exactly two vision-tower
images, a repeat behind other text exactly two embedding-cache hits, the same prompt again two
prefix-cache images; with `--mm-embedding-cache-mb 0` (nothing can be cached) the vision tower
encodes each image of each request exactly once. Greedy outputs equal transformers' LLaVA on the
checkpoint's own processor.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.hf_reference import HFLlava, assert_same_greedy
from tests.support.images import image_payload, random_rgb
from tests.support.mm_sources import delta, image_sources, sources
from tests.support.server import run_server
from vla_server.policies.llava.demo import demo_model_path

CHUNK = 64
NEW_TOKENS = 32
# The two prompts differ before the first image, so no prefix covers an image of the second.
PROMPTS = (
    "left camera <image> right camera <image> pick up the red block",
    "open the drawer. left <image> right <image> then stop",
)
SERVERS = {"embedding cache": [], "no embedding cache": ["--mm-embedding-cache-mb", "0"]}


@pytest.fixture(scope="module")
def hf() -> HFLlava:
    return HFLlava(demo_model_path())


@pytest.fixture(scope="module", params=list(SERVERS))
def node(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chunked-mm")
    flags = ["--chunked-prefill-size", str(CHUNK), "--max-images-per-request", "2"]
    with run_server(demo_model_path(), tmp, *flags, *SERVERS[request.param]) as server:
        yield request.param, server


def generate(server: Any, text: str, images: list[Any]) -> dict[str, Any]:
    body = {
        "text": text,
        "image_data": [image_payload(im, "png") for im in images],
        "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True},
    }
    r = server.client().post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_an_image_split_over_chunks_is_resolved_once_per_request(node, hf):
    name, server = node
    info = server.client().get("/get_server_info").json()
    assert info["mm"]["num_image_tokens"] > CHUNK, "every image must span a chunk boundary"
    cached = name == "embedding cache"
    assert (info["mm"]["embedding_cache"]["budget_bytes"] > 0) == cached
    images = [random_rgb(120, 160, seed=7), random_rgb(90, 100, seed=8)]
    c0 = image_sources(server)
    new = generate(server, PROMPTS[0], images)
    c1 = image_sources(server)
    assert delta(c0, c1) == sources(tower=2)
    other_text = generate(server, PROMPTS[1], images)
    c2 = image_sources(server)
    assert delta(c1, c2) == (sources(cache=2) if cached else sources(tower=2))
    same = generate(server, PROMPTS[0], images)
    assert delta(c2, image_sources(server)) == sources(prefix=2)
    assert same["output_ids"] == new["output_ids"]
    for text, out in ((PROMPTS[0], new), (PROMPTS[1], other_text)):
        ref = hf.generate_text(text, images, NEW_TOKENS, stop_at_eos=False)
        assert len(ref.tokens) == NEW_TOKENS, "the reference stopped early"
        assert out["meta_info"]["prompt_tokens"] == ref.prompt_len
        assert_same_greedy(out["output_ids"], ref.tokens, ref.logits, f"{name}: {text}")
