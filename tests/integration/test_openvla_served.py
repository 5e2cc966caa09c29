"""An OpenVLA checkpoint in the published layout, served unchanged, against OpenVLA itself.

The checkpoint is written by `prismatic_ref` in openvla/openvla-7b's layout (config.json with
`model_type: openvla` and remote code in `auto_map`, `vision_backbone.{featurizer,
fused_featurizer}.*` timm towers with `scale_factor` LayerScales, `projector.fc1..3`,
`language_model.*`, a Llama-style tokenizer with an added `<PAD>`, Prismatic's
preprocessor_config.json), with small towers of the real DINOv2-with-registers and SigLIP
designs. The reference is OpenVLA's `predict_action` semantics run by timm and transformers'
`LlamaForCausalLM` in a separate process: unconstrained greedy decoding, which the checkpoint's
weights make land on action bins, so it must agree with the node's bin-constrained decoding.
12 combinations: 3 frames x 2 instructions x 2 robots (the `norm_stats` keys).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.support.images import png_base64, random_rgb
from tests.support.mm_sources import delta, image_sources, sources
from tests.support.prismatic_ref.oracle_env import build_openvla_checkpoint, reference_predict
from tests.support.server import module_server

KEYS = ("bridge_orig", "fractal20220817_data")
INSTRUCTIONS = ("pick up the red block", "Open the top drawer")
FRAMES = [random_rgb(224, 224, seed=1), random_rgb(480, 640, seed=2), random_rgb(300, 260, seed=3)]
COMBOS = list(itertools.product(range(len(FRAMES)), range(len(INSTRUCTIONS)), KEYS))
TINY = {"backbone": "dinosiglip-vit-so-224px", "towers": "tiny", "norm_keys": ",".join(KEYS)}
PROMPT = "In: What action should the robot take to {}?\nOut:"


def openvla_path():
    return build_openvla_checkpoint(**TINY)


server = module_server(
    openvla_path,
    "--openpi-image-keys",
    "observation/image",
    "--openpi-unnorm-key",
    KEYS[0],
)


@pytest.fixture(scope="module")
def reference():
    requests = [
        {"image_png_b64": png_base64(FRAMES[f]), "instruction": INSTRUCTIONS[i], "unnorm_key": k}
        for f, i, k in COMBOS
    ]
    out = reference_predict(openvla_path(), requests)
    assert len(out) == len(COMBOS)
    return out


def prompt(instruction: str) -> str:
    return PROMPT.format(instruction.lower())


def generate(server, frame: int, text: str, key: str, **extra) -> dict:
    body = {
        "text": text,
        "image_data": png_base64(FRAMES[frame]),
        "num_actions": 1,
        "unnorm_key": key,
        "sampling_params": {"temperature": 0},
        **extra,
    }
    with server.client() as c:
        r = c.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def assert_same_action(tokens: list[int], actions: list[float], ref: dict) -> None:
    assert tokens == ref["token_ids"]
    np.testing.assert_allclose(np.asarray(actions), np.asarray(ref["actions"]), rtol=0, atol=1e-5)


def test_reference_is_a_meaningful_oracle(reference):
    """Every reference action is 7 action-bin tokens, and they differ across the inputs."""
    for ref in reference:
        assert len(ref["token_ids"]) == 7 and all(768 <= t < 1024 for t in ref["token_ids"])
    assert len({tuple(r["token_ids"]) for r in reference}) >= 6


def test_model_info_counts_bins_back_from_the_base_vocabulary(server):
    with server.client() as c:
        info = c.get("/get_model_info").json()
        mm = c.get("/get_server_info").json()["mm"]
    assert info["actions"]["bin_token_ids"] == [768, 1023]
    assert info["actions"]["unnorm_keys"] == sorted(KEYS)
    assert mm["num_image_tokens"] == 256 and mm["image_token"] == "<image>"


def test_generate_equals_predict_action(server, reference):
    for (frame, which, key), ref in zip(COMBOS, reference, strict=True):
        out = generate(server, frame, prompt(INSTRUCTIONS[which]), key)
        # the prompt as OpenVLA tokenizes it, plus the empty token predict_action appends
        assert out["meta_info"]["prompt_tokens"] == len(ref["input_ids"]) + 256
        assert_same_action(out["output_ids"], out["actions"][0], ref)


def test_leading_placeholder_gives_the_same_result(server, reference):
    frame, which, key = COMBOS[5]
    out = generate(server, frame, "<image>" + prompt(INSTRUCTIONS[which]), key)
    assert_same_action(out["output_ids"], out["actions"][0], reference[5])


def test_v1_actions_builds_openvla_prompt(server, reference):
    for (frame, which, key), ref in zip(COMBOS, reference, strict=True):
        body = {
            "instruction": INSTRUCTIONS[which],
            "image_data": png_base64(FRAMES[frame]),
            "unnorm_key": key,
            "return_token_ids": True,
        }
        with server.client() as c:
            r = c.post("/v1/actions", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["usage"]["prompt_tokens"] == len(ref["input_ids"]) + 256
        assert_same_action(out["action_token_ids"][0], out["actions"][0], ref)


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_openpi_client_gets_predict_action(server, reference):
    policy_module = pytest.importorskip("openpi_client.websocket_client_policy")
    client = policy_module.WebsocketClientPolicy("127.0.0.1", server.port)
    assert client.get_server_metadata()["unnorm_key"] == KEYS[0]
    for (frame, which, key), ref in zip(COMBOS, reference, strict=True):
        obs = {"observation/image": FRAMES[frame], "prompt": INSTRUCTIONS[which]}
        if key != KEYS[0]:  # the node's --openpi-unnorm-key serves the others without one
            obs["unnorm_key"] = key
        actions = client.infer(obs)["actions"]
        assert actions.shape == (1, 7)
        np.testing.assert_allclose(actions[0], np.asarray(ref["actions"]), rtol=0, atol=1e-5)


def test_several_robots_need_an_unnorm_key(server):
    body = {"instruction": "pick up the red block", "image_data": png_base64(FRAMES[0])}
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 400 and "unnorm_key" in r.text


def test_one_image_per_prompt(server):
    frames = [png_base64(FRAMES[0]), png_base64(FRAMES[1])]
    body = {"instruction": "pick", "image_data": frames, "unnorm_key": KEYS[0]}
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 400 and "image_data" in r.text and "one image" in r.text


def test_repeated_frame_skips_the_towers(server, reference):
    frame = random_rgb(240, 320, seed=77)
    body = {"image_data": png_base64(frame), "num_actions": 1, "unnorm_key": KEYS[0]}
    before = image_sources(server)  # /metrics and /get_server_info, checked to agree
    with server.client() as c:
        for instruction in (*INSTRUCTIONS, INSTRUCTIONS[0]):
            r = c.post("/generate", json={**body, "text": prompt(instruction)})
            assert r.status_code == 200, r.text
    # the image sits right after BOS: every later instruction finds it in the prefix cache
    assert delta(before, image_sources(server)) == sources(prefix=2, tower=1)


def test_caller_mm_hashes_are_used_as_given(server, reference):
    """A caller's hash names the image: a different frame under frame 0's hash is frame 0."""
    frame, which, key = COMBOS[0]
    mm_hash = "00112233445566778899aabbccddeeff"
    first = generate(server, frame, prompt(INSTRUCTIONS[which]), key, mm_hashes=[mm_hash])
    assert_same_action(first["output_ids"], first["actions"][0], reference[0])
    other = generate(server, 1, prompt(INSTRUCTIONS[which]), key, mm_hashes=[mm_hash])
    assert other["output_ids"] == first["output_ids"]
    assert other["meta_info"]["cached_tokens"] >= 256
