"""The vision-embedding cache, image identity (hashes) and bad image/action input, on a live node
serving the demo VLA (`--max-images-per-request 2`, one allow-listed local media directory).

Where each image's embeddings came from (prefix cache, embedding cache, vision tower) is read from
`/get_server_info` (both `mm.embedding_cache` and the scheduler's
`internal_states[0].mm_embedding_cache`) and from the Prometheus gauges, checked to agree. The image
hash is recomputed here from its documented byte layout (xxh3-128 over scheme, shape, the served
preprocess digest and the pixels), independently of the server's parse path.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

from tests.support.images import encode, image_payload, png_bytes, random_rgb, smooth_rgb
from tests.support.mm_sources import delta, image_sources, sources
from tests.support.server import idle_state, run_server
from vla_frames.image_hash import format_mm_hash, image_hash
from vla_server.policies.llava.demo import demo_model_path

MAX_IMAGES = 2
GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


class Node:
    def __init__(self, server: Any, media_dir: Path):
        self.server = server
        self.media_dir = media_dir
        self.client = server.client()
        self.tokens_per_image = self.client.get("/get_server_info").json()["mm"]["num_image_tokens"]

    def generate(self, text: str, images: list[Any], **extra: Any) -> dict[str, Any]:
        body = {"text": text, "image_data": images, "sampling_params": GREEDY, **extra}
        r = self.client.post("/generate", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def cache(self) -> dict[str, int]:
        return image_sources(self.server)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo-mm")
    media = tmp / "media"
    media.mkdir()
    with run_server(
        demo_model_path(),
        tmp,
        "--max-images-per-request",
        str(MAX_IMAGES),
        "--allowed-local-media-path",
        str(media),
    ) as server:
        yield Node(server, media)


def test_same_image_skips_the_vision_tower(node):
    image = image_payload(random_rgb(96, 128, seed=100), "png")
    c0 = node.cache()
    first = node.generate("<image>\npick up the red block", [image])
    c1 = node.cache()
    assert delta(c0, c1) == sources(tower=1)
    # Same prompt: the prefix cache holds every image position, nothing is looked up.
    again = node.generate("<image>\npick up the red block", [image])
    c2 = node.cache()
    assert delta(c1, c2) == sources(prefix=1)
    image_end = 1 + node.tokens_per_image  # BOS, then the image
    assert again["meta_info"]["cached_tokens"] >= image_end
    assert again["output_ids"] == first["output_ids"]
    # Text before the image differs: no prefix can cover it, the embedding cache must.
    node.generate("open the drawer <image>\nthen", [image])
    assert delta(c2, node.cache()) == sources(cache=1)


def documented_hash(pixels: np.ndarray, digest: bytes) -> str:
    """The image identity as image_hash's docstring lays it out, computed here."""
    h = xxhash.xxh3_128()
    h.update(b"vla-image-v1\0" + struct.pack("<III", *pixels.shape) + digest)
    h.update(pixels.tobytes())
    return f"{h.intdigest():032x}"


def test_server_hash_is_the_documented_image_hash(node):
    pixels = smooth_rgb(90, 110)
    digest = bytes.fromhex(node.client.get("/get_server_info").json()["mm"]["preprocess_digest"])
    assert len(digest) == 16
    expected = documented_hash(pixels, digest)
    assert format_mm_hash(image_hash(pixels, digest)) == expected
    c0 = node.cache()
    node.generate("push the cup <image>", [image_payload(pixels, "png")])  # server-side hash
    c1 = node.cache()
    assert delta(c0, c1) == sources(tower=1)
    # The same pixels under the hash computed here (other text first, so no prefix match):
    # a hit only if the server keyed its cache with exactly this value.
    node.generate("lift the bowl <image>", [image_payload(pixels, "raw")], mm_hashes=[expected])
    c2 = node.cache()
    assert delta(c1, c2) == sources(cache=1)
    # Another wire form of the same pixels is the same image.
    node.generate("close the gripper <image>", [image_payload(pixels, "data_url")])
    assert delta(c2, node.cache()) == sources(cache=1)


def test_caller_hash_is_trusted_as_given(node):
    first, second = random_rgb(80, 80, seed=200), random_rgb(80, 80, seed=201)
    claimed = "0123456789abcdef" * 2
    c0 = node.cache()
    node.generate("move left <image>", [image_payload(first, "png")], mm_hashes=claimed)
    c1 = node.cache()
    assert delta(c0, c1) == sources(tower=1)
    # Different pixels, same claimed identity: served from the cache as the first image.
    text = "stack the cup <image>\nnow"
    trusted = node.generate(text, [image_payload(second, "png")], mm_hashes=[claimed])
    assert delta(c1, node.cache()) == sources(cache=1)
    as_first = node.generate(text, [image_payload(first, "png")])  # its own hash: a miss
    as_second = node.generate(text, [image_payload(second, "png")])
    assert trusted["output_ids"] == as_first["output_ids"]
    assert as_second["output_ids"] != as_first["output_ids"], "the image must steer the output"


def test_local_path_inside_the_allowed_directory_works(node):
    pixels = random_rgb(64, 72, seed=300)
    path = node.media_dir / "frame.png"
    path.write_bytes(png_bytes(pixels))
    want = node.generate("<image> grasp", [image_payload(pixels, "png")])["output_ids"]
    assert node.generate("<image> grasp", [str(path)])["output_ids"] == want
    assert node.generate("<image> grasp", [path.as_uri()])["output_ids"] == want


# ---- bad input -------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (and whose data is a tiny 1x1 image)."""
    real = png_bytes(np.zeros((1, 1, 3), np.uint8))
    return real[:16] + struct.pack(">II", width, height) + real[24:]


PNG = png_bytes(smooth_rgb(48, 64))
JPEG = encode(smooth_rgb(48, 64), "JPEG", quality=90)
IMG = b64(PNG)
ACT = {"num_actions": 2, "unnorm_key": "demo_arm"}


def raw(shape: list[int], n_bytes: int) -> dict[str, Any]:
    return {"shape": shape, "dtype": "uint8", "data": b64(bytes(n_bytes))}


# name -> (body given the allowed media dir, field, words the message must contain)
BAD: dict[str, tuple[Callable[[Path], dict[str, Any]], str, str]] = {
    "empty": (lambda d: {"image_data": ""}, "image_data[0]", "empty image"),
    "empty data url": (
        lambda d: {"image_data": "data:image/png;base64,"},
        "image_data[0]",
        "empty image",
    ),
    "png cut in header": (
        lambda d: {"image_data": b64(PNG[:20])},
        "image_data[0]",
        "truncated PNG",
    ),
    "png cut in data": (
        lambda d: {"image_data": b64(PNG[: len(PNG) // 2])},
        "image_data[0]",
        "truncated or corrupt PNG",
    ),
    "jpeg cut in header": (
        lambda d: {"image_data": b64(JPEG[:12])},
        "image_data[0]",
        "truncated JPEG",
    ),
    "jpeg cut in data": (
        lambda d: {"image_data": b64(JPEG[: len(JPEG) // 2])},
        "image_data[0]",
        "truncated or corrupt JPEG",
    ),
    "wrong base64": (lambda d: {"image_data": "iVBORw0KGgo!!"}, "image_data[0]", "base64"),
    "100000x100000 header": (
        lambda d: {"image_data": b64(png_claiming(100000, 100000))},
        "image_data[0]",
        "100000x100000",
    ),
    "100000x100000 raw shape": (
        lambda d: {"image_data": raw([100000, 100000, 3], 12)},
        "image_data[0]",
        "100000x100000",
    ),
    "too many images": (
        lambda d: {"text": "<image><image><image> go", "image_data": [IMG] * 3},
        "image_data",
        f"at most {MAX_IMAGES}",
    ),
    "more images than placeholders": (
        lambda d: {"text": "<image> go", "image_data": [IMG] * 2},
        "text",
        "1 image placeholders for 2 images",
    ),
    "path outside allow-list": (
        lambda d: {"image_data": "/etc/hostname"},
        "image_data[0]",
        "outside the allowed media directory",
    ),
    "path escaping with ..": (
        lambda d: {"image_data": str(d) + "/../server.log"},
        "image_data[0]",
        "outside the allowed media directory",
    ),
    "remote url": (
        lambda d: {"image_data": "http://127.0.0.1:9/frame.png"},
        "image_data[0]",
        "remote image URLs are disabled",
    ),
    "raw byte count": (
        lambda d: {"image_data": raw([4, 4, 3], 47)},
        "image_data[0]",
        "byte count mismatch",
    ),
    "unknown unnorm_key": (
        lambda d: {"image_data": IMG, **ACT, "unnorm_key": "franka"},
        "unnorm_key",
        "unknown unnorm_key 'franka'",
    ),
    "num_actions 0": (lambda d: {"image_data": IMG, **ACT, "num_actions": 0}, "num_actions", ">="),
    "num_actions too large": (
        lambda d: {"image_data": IMG, **ACT, "num_actions": 10_000},
        "num_actions",
        "must be in [1, ",
    ),
    # Sampling is constrained to the bins: a stop could only cut an action in half.
    "actions with stop": (
        lambda d: {"image_data": IMG, **ACT, "sampling_params": {**GREEDY, "stop": ["<"]}},
        "sampling_params.stop",
        "cannot be combined with num_actions",
    ),
    "actions with stop_token_ids": (
        lambda d: {"image_data": IMG, **ACT, "sampling_params": {**GREEDY, "stop_token_ids": [5]}},
        "sampling_params.stop_token_ids",
        "cannot be combined with num_actions",
    ),
    "mm_hashes count": (
        lambda d: {"image_data": IMG, "mm_hashes": ["0" * 32, "1" * 32]},
        "mm_hashes",
        "2 entries for 1 images",
    ),
    "mm_hashes not hex": (
        lambda d: {"image_data": IMG, "mm_hashes": ["zz" * 16]},
        "mm_hashes",
        "non-hex",
    ),
    "mm_hashes without images": (
        lambda d: {"text": "pick up the cube", "mm_hashes": ["0" * 32]},
        "mm_hashes",
        "for 0 images",
    ),
    "mm_hashes too short": (
        lambda d: {"image_data": IMG, "mm_hashes": "abc123"},
        "mm_hashes",
        "32 hex digits",
    ),
}


@pytest.mark.parametrize(
    "name",
    list(BAD),
)
def test_bad_input_is_a_4xx_that_leaks_nothing(node, name):
    make, field, words = BAD[name]
    before = idle_state(node.client)
    body = {"text": "<image> what should the robot do", "sampling_params": GREEDY}
    r = node.client.post("/generate", json={**body, **make(node.media_dir)})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    error = r.json()["error"]
    assert error["field"].startswith(field), error
    assert words in error["message"], error
    assert before["pending"] == 0
    assert idle_state(node.client) == before


def test_node_keeps_serving_after_bad_input(node):
    out = node.generate("<image> pick up the cube", [IMG], **ACT)
    assert len(out["actions"]) == ACT["num_actions"]
    # The image limit is inclusive.
    assert node.generate("<image> left <image> right", [IMG] * MAX_IMAGES)["output_ids"]
    assert idle_state(node.client)["pending"] == 0
