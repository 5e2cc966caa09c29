"""A pi0-FAST checkpoint in LeRobot's layout, served unchanged, against transformers' PaliGemma.

The checkpoint is the tiny one `vla_server.policies.pi0fast.tiny` writes (two cameras, a
4-dim state, chunks of 4 x 3 actions, FAST and PaliGemma-like tokenizers). The reference
(`tests/support/pi0fast_reference.py`) is transformers' `PaliGemmaForConditionalGeneration`
built from the same files, greedy with the prompt prefix marked by `token_type_ids`, restricted
to the same tokens the node allows an action request (FAST tokens, `|`, EOS), and an
independent FAST
decoder (tokenizers BPE, scipy's inverse DCT, LeRobot's unnormaliser). 12 cases: 2 frame pairs
x 3 instructions x 2 states. The random weights seldom end a chunk with `|` after exactly
4 x 3 coefficients, so the cases ask for LeRobot's relaxed decoding; strict decoding of the same
tokens is an action_error (checked too), and strict decoding of well-formed chunks is checked
on the codec and the detokenizer in unit tests.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from tests.support import pi0fast_reference as ref
from tests.support.families import family_tokenizer
from tests.support.images import png_base64, random_rgb
from tests.support.server import module_server
from tests.support.sse import stream_generate
from vla_server.policies.pi0fast.tiny import MAX_DECODING_STEPS, pi0fast_model_path
from vla_server.policies.pi_common.tiny_paligemma import CAMERAS, FAST_VOCAB, IMAGE_SIZE, SKIP

FRAMES = [
    (random_rgb(40, 60, seed=1), random_rgb(28, 28, seed=2)),
    (random_rgb(90, 50, seed=3), random_rgb(64, 64, seed=4)),
]
INSTRUCTIONS = ("pick up the red block", "Open the top_drawer", "stack the cup\non the plate")
STATES = ([0.1, 1.2, 0.0, 3.3], [-2.0, 0.5, 0.499, 2.0])
CASES = list(itertools.product(range(len(FRAMES)), range(len(INSTRUCTIONS)), range(len(STATES))))

server = module_server(lambda: pi0fast_model_path("bare"))


@pytest.fixture(scope="module")
def folder() -> str:
    return str(pi0fast_model_path("bare"))


@pytest.fixture(scope="module")
def oracle(folder):
    """For each case: the reference's greedy FAST ids and its relaxed-decoded actions."""
    model, tokenizer = ref.hf_paligemma(folder), family_tokenizer(folder)
    info = _model_info(folder)
    band = list(range(info["fast"][0], info["fast"][1] + 1))
    allowed, stops = band + info["ends"], set(info["ends"])
    out = []
    for f, i, s in CASES:
        pixels = torch.stack([ref.lerobot_pixels(im, IMAGE_SIZE, IMAGE_SIZE) for im in FRAMES[f]])
        ids = ref.prompt_ids(
            tokenizer, INSTRUCTIONS[i], ref.state_bins(folder, STATES[s]), "lerobot"
        )
        run = ref.greedy(model, pixels, ids, info["tail"], 0, allowed, stops, info["budget"])
        fast_ids = [t for t in run.tokens if t not in stops]
        out.append((fast_ids, ref.fast_actions(folder, fast_ids, relaxed=True), len(ids)))
    return out


def _model_info(folder: str) -> dict:
    tokenizer = family_tokenizer(folder)
    tail = len(tokenizer("Action: ", add_special_tokens=False)["input_ids"])
    ends = [tokenizer.convert_tokens_to_ids(t) for t in ("|", "▁|")] + [tokenizer.eos_token_id]
    vocab = ref.hf_paligemma(folder).config.text_config.vocab_size
    first, last = vocab - 1 - SKIP - (FAST_VOCAB - 1), vocab - 1 - SKIP
    return {"fast": (first, last), "ends": ends, "tail": tail, "budget": MAX_DECODING_STEPS - tail}


def _body(f: int, i: int, s: int, **extra) -> dict:
    return {
        "instruction": INSTRUCTIONS[i],
        "image_data": [png_base64(im) for im in FRAMES[f]],
        "state": STATES[s],
        "return_token_ids": True,
        "relaxed_decoding": True,
        **extra,
    }


def _actions(server, body: dict) -> dict:
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_reference_is_a_meaningful_oracle(oracle):
    """Every case generates its own tokens; some chunks end early (at EOS), most at the budget."""
    assert len({tuple(ids) for ids, _, _ in oracle}) == len(CASES)
    assert len({len(ids) for ids, _, _ in oracle}) > 1


def test_model_info_describes_the_fast_tokens(server, folder):
    with server.client() as c:
        info = c.get("/get_model_info").json()
    actions = info["actions"]
    assert actions["kind"] == "fast" and actions["chunk_size"] == 4 and actions["action_dim"] == 3
    assert tuple(actions["fast_token_ids"]) == _model_info(folder)["fast"]
    assert info["num_image_tokens"] == 4


def test_v1_actions_equal_transformers_and_the_reference_decoder(server, oracle):
    for (f, i, s), (fast_ids, actions, prompt_len) in zip(CASES, oracle, strict=True):
        out = _actions(server, _body(f, i, s))
        assert out["action_token_ids"] == fast_ids
        assert out["usage"]["prompt_tokens"] == prompt_len + 4 * len(CAMERAS)
        np.testing.assert_allclose(np.asarray(out["actions"]), actions, rtol=0, atol=1e-4)
        assert out["num_actions"] == 4 and out["action_dim"] == 3


def test_strict_decoding_ends_with_action_error(server, oracle):
    fast_ids, _, _ = oracle[0]
    assert ref.fast_actions(str(pi0fast_model_path("bare")), fast_ids, relaxed=False) is None
    with server.client() as c:
        r = c.post("/v1/actions", json=_body(*CASES[0], relaxed_decoding=False))
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "action_error" and "coefficients" in error["message"]


def test_an_exact_repeat_is_a_full_cache_hit_and_a_new_last_token_reuses_nothing(server, oracle):
    body = _body(1, 0, 1)
    first, again = _actions(server, body), _actions(server, body)
    prompt = first["usage"]["prompt_tokens"]
    assert again["usage"]["cached_tokens"] == prompt - 1  # all but the token that samples
    assert (
        again["action_token_ids"] == first["action_token_ids"] == oracle[CASES.index((1, 0, 1))][0]
    )
    # Same images and instruction, the state's last bin differs: the prompt's last prefix token.
    changed = _actions(server, {**body, "state": [*STATES[1][:3], 3.9]})
    assert changed["usage"]["cached_tokens"] == 0


def test_generate_streams_the_fast_tokens_then_one_chunk(server, oracle, folder):
    f, i, s = CASES[2]
    bins = ref.state_bins(folder, STATES[s])
    text = f"Task: {INSTRUCTIONS[i].replace('_', ' ')}, State: {' '.join(map(str, bins))};\n"
    body = {
        "text": text,
        "image_data": [png_base64(im) for im in FRAMES[f]],
        "num_actions": 4,
        "relaxed_decoding": True,
        "sampling_params": {"temperature": 0},
    }
    chunks = stream_generate(server, body)
    with_actions = [c for c in chunks if c.get("actions")]
    assert len(chunks) > 2 and with_actions == [chunks[-1]]  # tokens first, the chunk at the end
    fast_ids, actions, _ = oracle[2]
    assert chunks[-1]["output_ids"][: len(fast_ids)] == fast_ids
    np.testing.assert_allclose(np.asarray(chunks[-1]["actions"]), actions, rtol=0, atol=1e-4)


def test_cameras_by_name_and_a_missing_camera(server, folder):
    """A camera left out is as LeRobot's masked camera: no tokens, the others' order kept."""
    f, i, s = CASES[4]
    out = _actions(server, _body(f, i, s, image_data={"wrist_0_rgb": png_base64(FRAMES[f][1])}))
    model, tokenizer = ref.hf_paligemma(folder), family_tokenizer(folder)
    info = _model_info(folder)
    pixels = ref.lerobot_pixels(FRAMES[f][1], IMAGE_SIZE, IMAGE_SIZE)[None]
    ids = ref.prompt_ids(tokenizer, INSTRUCTIONS[i], ref.state_bins(folder, STATES[s]), "lerobot")
    band = list(range(info["fast"][0], info["fast"][1] + 1))
    run = ref.greedy(
        model, pixels, ids, info["tail"], 0, band + info["ends"], set(info["ends"]), info["budget"]
    )
    assert out["action_token_ids"] == [t for t in run.tokens if t not in info["ends"]]
    assert out["usage"]["prompt_tokens"] == len(ids) + 4
    both = _actions(
        server,
        _body(
            f,
            i,
            s,
            image_data={
                "wrist_0_rgb": png_base64(FRAMES[f][1]),
                "base_0_rgb": png_base64(FRAMES[f][0]),
            },
        ),
    )
    assert both["action_token_ids"] == _actions(server, _body(f, i, s))["action_token_ids"]


def test_num_actions_returns_the_first_of_the_chunk(server, oracle):
    out = _actions(server, _body(*CASES[3], num_actions=2))
    np.testing.assert_allclose(np.asarray(out["actions"]), oracle[3][1][:2], rtol=0, atol=1e-4)


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_openpi_client_gets_the_chunk(server, oracle):
    policy_module = pytest.importorskip("openpi_client.websocket_client_policy")
    client = policy_module.WebsocketClientPolicy("127.0.0.1", server.port)
    meta = client.get_server_metadata()
    assert meta["action_horizon"] == 4 and meta["cameras"] == list(CAMERAS)
    assert meta["uses_state"] and meta["state_dim"] == 4
    for case in CASES[:3]:
        f, i, s = case
        obs = {
            "observation/wrist_0_rgb": FRAMES[f][1],  # named cameras, in any order
            "observation/base_0_rgb": FRAMES[f][0],
            "observation/state": np.asarray(STATES[s], dtype=np.float64),
            "prompt": INSTRUCTIONS[i],
            "relaxed_decoding": True,
        }
        actions = client.infer(obs)["actions"]
        assert actions.shape == (4, 3)
        expected = oracle[CASES.index(case)][1]
        np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"state": None}, "state"),
        ({"state": [1.0, 2.0]}, "state"),
        ({"state": ["a", 1, 2, 3]}, "state"),
        ({"unnorm_key": "bridge_orig"}, "unnorm_key"),
        ({"num_actions": 5}, "num_actions"),
        ({"image_data": [png_base64(FRAMES[0][0])]}, "image_data"),
        ({"image_data": {"top": png_base64(FRAMES[0][0])}}, "image_data"),
        ({"instruction": "pick up the red block " * 12}, "instruction"),
        ({"relaxed_decoding": "yes"}, "relaxed_decoding"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(server, change, field):
    body = {k: v for k, v in {**_body(0, 0, 0), **change}.items() if v is not None}
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"].startswith(field), r.text
