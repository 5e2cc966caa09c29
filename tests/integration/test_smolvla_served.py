"""SmolVLA served end to end (real server processes) against its model half in this process.

The tiny LeRobot-layout folder (`vla_server.policies.smolvla.tiny`: two cameras, a 6-dim
state, chunks of 10 x 6 actions from 10 Euler steps, mean-std statistics) through every door:
`/v1/actions`, `/generate` with `num_actions`, the openpi WebSocket. The oracle is the model
half's `SmolVLAPolicy.predict_action_chunk` (LeRobot's processors and the dense prefix) on the
same frames, state, instruction and seed; the model half itself is checked against a test-only
reference and LeRobot in `tests/unit/policies/test_smolvla_*.py`.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import numpy as np
import pytest
import torch

from tests.support.doors import same_chunk_through_three_doors
from tests.support.images import png_base64, random_rgb
from tests.support.server import (
    assert_refused,
    internal_state,
    model_work,
    module_server,
    post_actions,
)
from vla_server.policies.smolvla.policy import SmolVLAPolicy
from vla_server.policies.smolvla.processor import Observation
from vla_server.policies.smolvla.tiny import ACTION_DIM, CAMERAS, CHUNK, smolvla_model_path

NAMES = tuple(c.removeprefix("observation.images.") for c in CAMERAS)
CAMERA_SETS = [
    {NAMES[0]: random_rgb(48, 64, seed=1), NAMES[1]: random_rgb(40, 30, seed=2)},
    {NAMES[0]: random_rgb(32, 32, seed=3), NAMES[1]: random_rgb(50, 90, seed=4)},
    {NAMES[0]: random_rgb(33, 47, seed=5)},  # camera2 left out: the prefix is 16 tokens shorter
    {NAMES[1]: random_rgb(60, 20, seed=6)},  # camera1 left out
]
INSTRUCTIONS = ("pick up the red block", "open the top drawer and put the sponge inside")
STATES = ([0.3, -1.2, 0.5, 2.0, -0.7, 1.1], [-0.7, 0.1, 1.5, -0.4, 2.2, -1.9])
CASES = list(itertools.product(range(len(CAMERA_SETS)), range(2), range(2)))

smolvla_server = module_server(smolvla_model_path)
# A prefill budget of about one prompt a step: a batch's prompts are admitted one after another,
# so their chunks denoise in shared passes at different steps.
staggered_server = module_server(smolvla_model_path, "--chunked-prefill-size", "40")
# LeRobot's empty_cameras: 1 adds a masked empty camera slot (and masks a missing camera).
empty_camera_server = module_server(lambda: smolvla_model_path(empty_cameras=1))


def _body(c: int, i: int, s: int, seed: int) -> dict:
    images = {name: png_base64(im) for name, im in CAMERA_SETS[c].items()}
    return {"instruction": INSTRUCTIONS[i], "image_data": images, "state": STATES[s],
            "seed": seed}  # fmt: skip


@cache
def _policy(empty_cameras: int = 0) -> SmolVLAPolicy:
    return SmolVLAPolicy.from_folder(smolvla_model_path(empty_cameras=empty_cameras))


def _expected(c: int, i: int | str, s: int, seed: int, empty_cameras: int = 0) -> np.ndarray:
    """The model half's chunk [CHUNK, ACTION_DIM] (robot units) for the same inputs
    (`i`: an instruction's index, or the instruction)."""
    instruction = INSTRUCTIONS[i] if isinstance(i, int) else i
    images = {f"observation.images.{name}": torch.from_numpy(im).permute(2, 0, 1)[None]
              for name, im in CAMERA_SETS[c].items()}  # fmt: skip
    obs = Observation(images, torch.tensor([STATES[s]]), [instruction])
    policy = _policy(empty_cameras)
    return policy.predict_action_chunk(obs, seeds=[seed])[0].numpy()


@pytest.mark.parametrize("case", CASES, ids=[f"cams{c}-task{i}-state{s}" for c, i, s in CASES])
def test_actions_equal_the_model_half(smolvla_server, case):
    seed = 100 + CASES.index(case)
    out = post_actions(smolvla_server, _body(*case, seed=seed))
    assert out["num_actions"] == CHUNK and out["action_dim"] == ACTION_DIM
    assert out["finish_reason"] == "actions" and out["usage"]["completion_tokens"] == 0
    expected = _expected(*case, seed=seed)
    assert np.abs(expected).max() > 0.5
    np.testing.assert_allclose(np.asarray(out["actions"]), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("c", [0, 2, 3])
def test_an_empty_cameras_folder_serves_what_lerobot_computes(empty_camera_server, c):
    """With empty_cameras 1 LeRobot's prefix has masked slots (the empty camera, a missing
    one); the node leaves them out, which is the same computation."""
    out = post_actions(empty_camera_server, _body(c, 1, 0, seed=80 + c))
    expected = _expected(c, 1, 0, seed=80 + c, empty_cameras=1)
    np.testing.assert_allclose(np.asarray(out["actions"]), expected, rtol=0, atol=1e-5)
    text = len(_policy().processor.tokenizer(INSTRUCTIONS[1] + "\n")["input_ids"])
    assert out["usage"]["prompt_tokens"] == 16 * len(CAMERA_SETS[c]) + text + 1


def test_prompt_lengths_follow_the_cameras_present(smolvla_server):
    """16 tokens per image, the text without BOS or padding plus "\\n", one state token."""
    tokenizer = _policy().processor.tokenizer
    text = len(tokenizer(INSTRUCTIONS[0] + "\n")["input_ids"])
    two = post_actions(smolvla_server, _body(0, 0, 0, seed=1))["usage"]["prompt_tokens"]
    one = post_actions(smolvla_server, _body(2, 0, 0, seed=1))["usage"]["prompt_tokens"]
    assert (two, one) == (2 * 16 + text + 1, 16 + text + 1)


def test_repeat_is_a_full_prefix_hit_and_a_new_state_reuses_images_and_text(smolvla_server):
    body = {**_body(1, 1, 0, seed=5), "instruction": "wipe the table"}  # not seen yet
    before = internal_state(smolvla_server)
    first = post_actions(smolvla_server, body)
    mid = internal_state(smolvla_server)
    again = post_actions(smolvla_server, body)
    after = internal_state(smolvla_server)
    prompt = first["usage"]["prompt_tokens"]

    def delta(a: dict, b: dict) -> dict:
        (ca, _), (cb, _) = model_work(a), model_work(b)
        return {k: cb[k] - ca[k] for k in ca}

    assert delta(before, mid) == {"vlm_tokens": prompt, "expert_passes": 10, "expert_rows": 10}
    # The repeat (same frames, text, state) reuses the whole prompt: no VLM work at all.
    assert again["usage"]["cached_tokens"] == prompt
    assert delta(mid, after) == {"vlm_tokens": 0, "expert_passes": 10, "expert_rows": 10}
    assert again["actions"] == first["actions"]  # bit-identical
    # Another state: images and text never see it, so only the state token is computed.
    moved = post_actions(smolvla_server, {**body, "state": STATES[1]})
    assert moved["usage"]["cached_tokens"] == prompt - 1
    assert delta(after, internal_state(smolvla_server))["vlm_tokens"] == 1
    assert moved["actions"] != first["actions"]
    expected = _expected(1, "wipe the table", 1, seed=5)
    np.testing.assert_allclose(np.asarray(moved["actions"]), expected, rtol=0, atol=1e-5)
    for state in (mid, after):
        assert state["kv_pool"]["used"] == before["kv_pool"]["used"] == 0


def test_four_robots_at_once_get_the_chunks_they_get_alone(smolvla_server):
    bodies = [_body(c, c % 2, c % 2, seed=40 + c) for c in range(4)]
    bodies = [{**b, "instruction": f"{b['instruction']} {k}"} for k, b in enumerate(bodies)]
    alone = [post_actions(smolvla_server, b)["actions"] for b in bodies]
    with smolvla_server.client() as c:
        c.post("/flush_cache")  # so that together, too, each prompt is prefilled
    before = internal_state(smolvla_server)["model_counters"]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda b: post_actions(smolvla_server, b)["actions"], bodies))
    after = internal_state(smolvla_server)["model_counters"]
    np.testing.assert_allclose(np.asarray(together), np.asarray(alone), rtol=0, atol=1e-5)
    assert after["expert_rows"] - before["expert_rows"] == 40


def test_four_robots_admitted_at_different_steps_share_passes(staggered_server):
    """Deterministic: one batch of four prompts (each its own cameras, text and seed) on a
    node that prefills about one prompt a step, so each chunk starts denoising at another step
    and the passes mix rows at different times."""
    cases = [(0, 0), (2, 1), (1, 1), (3, 0)]
    body = {
        "text": [INSTRUCTIONS[i] + "\n" for _, i in cases],
        "image_data": [
            [png_base64(CAMERA_SETS[c][n]) for n in NAMES if n in CAMERA_SETS[c]] for c, _ in cases
        ],  # fmt: skip
        "num_actions": CHUNK,
        "state": STATES[1],
        "sampling_params": [{"seed": 60 + k} for k in range(4)],
    }
    before = internal_state(staggered_server)["model_counters"]
    with staggered_server.client() as c:
        r = c.post("/generate", json=body)
    assert r.status_code == 200, r.text
    after = internal_state(staggered_server)["model_counters"]
    passes = after["expert_passes"] - before["expert_passes"]
    assert after["expert_rows"] - before["expert_rows"] == 40
    assert 10 < passes < 40, passes  # shared passes, not all four from the same step
    for k, ((c, i), out) in enumerate(zip(cases, r.json(), strict=True)):
        expected = _expected(c, i, 1, seed=60 + k)
        np.testing.assert_allclose(np.asarray(out["actions"]), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"state": None}, "state"),
        ({"state": [1.0, 2.0]}, "state"),
        ({"state": [1.0] * 7}, "state"),
        ({"image_data": {"elbow": "x"}}, "image_data"),
        ({"temperature": 0.5}, "temperature"),
        ({"num_actions": CHUNK + 1}, "num_actions"),
        ({"unnorm_key": "bridge"}, "unnorm_key"),
    ],
)
def test_bad_input_names_the_field_and_leaves_nothing(smolvla_server, change, field):
    assert_refused(smolvla_server, {**_body(0, 0, 0, seed=1), **change}, field)


def test_generate_and_the_openpi_websocket_give_the_same_chunk(smolvla_server):
    frames = {name: CAMERA_SETS[0][name] for name in NAMES}
    reply = same_chunk_through_three_doors(
        smolvla_server, frames, INSTRUCTIONS[0], STATES[1], CHUNK, 21
    )
    # The same observation as the /v1/actions query just before: the whole prompt is cached.
    meta = reply["meta_info"]
    assert meta["cached_tokens"] == meta["prompt_tokens"] > 0
