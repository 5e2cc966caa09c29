"""pi0 and pi0.5 served unchanged, against independent references.

pi0: the tiny LeRobot-layout checkpoint (`vla_server.policies.pi0.tiny`, two cameras, a
4-dim state, chunks of 4 x 3 actions, 10 Euler steps) through `/v1/actions`, against
transformers' own `PI0ForConditionalGeneration.sample_actions` built from the same files
(`tests/support/pi0_reference.py`) with the same seeded noise; the test normalises the state and
unnormalises the chunk itself, from the statistics files, with LeRobot's mean-std formulas.
12 cases: 3 camera sets (two cameras twice, the base camera alone) x 2 instructions x 2 states.

pi0.5: the tiny checkpoint in openpi's conversion layout (`assets/<id>/norm_stats.json`, openpi's
quantile formulas), against the test-only reference written from the spec.
"""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from tests.support import pi0_reference as ref
from tests.support.doors import same_chunk_through_three_doors
from tests.support.families import family_tokenizer
from tests.support.images import png_base64, random_rgb
from tests.support.pi0fast_reference import lerobot_pixels
from tests.support.server import (
    assert_refused,
    internal_state,
    model_work,
    module_server,
    post_actions,
)
from vla_server.policies.pi0.tiny import CHUNK, MAX_DIM, pi0_model_path
from vla_server.policies.pi_common.tiny_paligemma import ACTION_DIM, CAMERAS, IMAGE_SIZE

CAMERA_SETS = [
    {CAMERAS[0]: random_rgb(40, 60, seed=1), CAMERAS[1]: random_rgb(28, 28, seed=2)},
    {CAMERAS[0]: random_rgb(90, 50, seed=3), CAMERAS[1]: random_rgb(64, 64, seed=4)},
    {CAMERAS[0]: random_rgb(33, 47, seed=5)},  # the wrist camera masked
]
INSTRUCTIONS = ("pick up the red block", "Open the top_drawer")
STATES = ([0.1, 1.2, 0.0, 3.3], [-2.0, 0.5, 0.499, 2.0])
CASES = list(itertools.product(range(3), range(2), range(2)))

pi0_server = module_server(lambda: pi0_model_path("pi0", "bare"))
pi05_server = module_server(lambda: pi0_model_path("pi05", "openpi"))
pi0_openpi_server = module_server(lambda: pi0_model_path("pi0", "openpi"))


def _body(c: int, i: int, s: int, seed: int) -> dict:
    images = {name: png_base64(im) for name, im in CAMERA_SETS[c].items()}
    return {"instruction": INSTRUCTIONS[i], "image_data": images, "state": STATES[s],
            "seed": seed}  # fmt: skip


def _pixels(c: int) -> tuple[torch.Tensor, list[bool]]:
    images = CAMERA_SETS[c]
    present = [name in images for name in CAMERAS]
    blank = torch.zeros(3, IMAGE_SIZE, IMAGE_SIZE)
    pixels = [lerobot_pixels(images[n], IMAGE_SIZE, IMAGE_SIZE) if n in images else blank
              for n in CAMERAS]  # fmt: skip
    return torch.stack(pixels), present


def _noise(seed: int) -> torch.Tensor:
    g = torch.Generator("cpu").manual_seed(seed)
    return torch.randn((1, CHUNK, MAX_DIM), generator=g, dtype=torch.float32)


def _lerobot_stats(folder: Path, feature: str) -> dict[str, np.ndarray]:
    pipeline = "policy_preprocessor" if feature == "observation.state" else "policy_postprocessor"
    step = next(s for s in json.loads((folder / f"{pipeline}.json").read_text())["steps"]
                if "state_file" in s)  # fmt: skip
    flat = load_file(str(folder / step["state_file"]))
    return {k.split(".")[-1]: v for k, v in flat.items() if k.rsplit(".", 1)[0] == feature}


@pytest.fixture(scope="module")
def pi0_oracle() -> list[np.ndarray]:
    """Per case: transformers PI0's chunk for seed 100 + case, unnormalised (robot units)."""
    folder = pi0_model_path("pi0", "bare")
    model, tokenizer = ref.hf_pi0(str(folder)), family_tokenizer(folder)
    st, act = _lerobot_stats(folder, "observation.state"), _lerobot_stats(folder, "action")
    out = []
    for n, (c, i, s) in enumerate(CASES):
        # LeRobot 0.6.1's pi0 prompt: the task as given (no strip, "_" kept), then "\n".
        ids = tokenizer(INSTRUCTIONS[i] + "\n")["input_ids"]
        pixels, present = _pixels(c)
        state = torch.zeros(MAX_DIM)
        state[:4] = torch.tensor((np.asarray(STATES[s]) - st["mean"]) / (st["std"] + 1e-8))
        inputs = ref.hf_inputs(model, pixels, present, ids, masked_tokens=False)
        chunk = ref.hf_sample(model, inputs, state, _noise(100 + n))[:, :ACTION_DIM].numpy()
        out.append(chunk * act["std"] + act["mean"])
    return out


def test_pi0_actions_equal_transformers_pi0(pi0_server, pi0_oracle):
    assert len({a.tobytes() for a in pi0_oracle}) == len(CASES)
    for n, case in enumerate(CASES):
        out = post_actions(pi0_server, _body(*case, seed=100 + n))
        assert out["num_actions"] == CHUNK and out["action_dim"] == ACTION_DIM
        assert out["finish_reason"] == "actions" and out["usage"]["completion_tokens"] == 0
        np.testing.assert_allclose(np.asarray(out["actions"]), pi0_oracle[n], rtol=0, atol=1e-4)


def test_only_the_openpi_layout_cleans_the_pi0_task(pi0_server, pi0_openpi_server):
    """openpi cleans a task ("_" to spaces, stripped) for pi0 as well; LeRobot's pi0 keeps it
    as given, so on a LeRobot folder the two spellings are two prompts."""
    as_given = {**_body(0, 0, 0, seed=3), "instruction": " pick_up the red_cube"}
    cleaned = {**as_given, "instruction": "pick up the red cube"}
    openpi = [post_actions(pi0_openpi_server, b) for b in (as_given, cleaned)]
    assert openpi[0]["usage"]["prompt_tokens"] == openpi[1]["usage"]["prompt_tokens"]
    assert openpi[0]["actions"] == openpi[1]["actions"]
    lerobot = [post_actions(pi0_server, b) for b in (as_given, cleaned)]
    assert lerobot[0]["usage"]["prompt_tokens"] != lerobot[1]["usage"]["prompt_tokens"]
    assert lerobot[0]["actions"] != lerobot[1]["actions"]


def test_design_counters_and_the_untouched_pool(pi0_server):
    body = {**_body(1, 0, 1, seed=5), "instruction": "wipe the table"}  # a prompt not seen yet
    before = internal_state(pi0_server)
    first = post_actions(pi0_server, body)
    mid = internal_state(pi0_server)
    again = post_actions(pi0_server, body)
    after = internal_state(pi0_server)
    prompt = first["usage"]["prompt_tokens"]
    (c0, s0), (c1, s1), (c2, s2) = model_work(before), model_work(mid), model_work(after)
    d1 = {k: c1[k] - c0[k] for k in c1}
    d2 = {k: c2[k] - c1[k] for k in c1}
    # The VLM ran over the prompt once; the expert ran once per Euler step.
    assert d1 == {"vlm_tokens": prompt, "expert_passes": 10, "expert_rows": 10}
    # The repeat (same frames, prompt, state) reused the whole prefix: no VLM work at all.
    assert again["usage"]["cached_tokens"] == prompt
    assert d2 == {"vlm_tokens": 0, "expert_passes": 10, "expert_rows": 10}
    # The phase clocks agree: the first chunk spent time in the decoder and the action head,
    # the repeat only in the action head (its images came with the cached prefix).
    assert all(s1[p] > s0.get(p, 0.0) for p in ("decoder", "action_head"))
    assert (s2.get("vision"), s2["decoder"]) == (s1.get("vision"), s1["decoder"])
    assert s2["action_head"] > s1["action_head"]
    # The same seed gives a bit-identical chunk; only the prompt's KV stays (as cache).
    assert again["actions"] == first["actions"]
    for state in (mid, after):
        assert state["kv_pool"]["used"] == before["kv_pool"]["used"] == 0
    assert mid["kv_pool"]["cached"] - before["kv_pool"]["cached"] == prompt


def test_four_robots_at_once_get_the_chunks_they_get_alone(pi0_server):
    bodies = [_body(c, 1, c % 2, seed=40 + c) for c in range(3)] + [_body(0, 0, 0, seed=43)]
    bodies = [{**b, "instruction": f"{b['instruction']} {k}"} for k, b in enumerate(bodies)]
    alone = [post_actions(pi0_server, b)["actions"] for b in bodies]
    before = internal_state(pi0_server)["model_counters"]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda b: post_actions(pi0_server, b)["actions"], bodies))
    after = internal_state(pi0_server)["model_counters"]
    np.testing.assert_allclose(np.asarray(together), np.asarray(alone), rtol=0, atol=1e-5)
    # Whether the four overlapped is up to timing here; that they share passes when they do is
    # shown deterministically in test_sched_flow.py and, on the real model, test_pi0_model.py.
    assert after["expert_rows"] - before["expert_rows"] == 40


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"state": None}, "state"),
        ({"state": [1.0, 2.0]}, "state"),
        ({"temperature": 0.5}, "temperature"),
        ({"return_token_ids": True}, "return_token_ids"),
        ({"relaxed_decoding": True}, "relaxed_decoding"),
        ({"image_data": {"elbow": "x"}}, "image_data"),
        ({"num_actions": CHUNK + 1}, "num_actions"),
        ({"unnorm_key": "bridge"}, "unnorm_key"),
    ],
)
def test_bad_input_names_the_field_and_leaves_nothing(pi0_server, change, field):
    assert_refused(pi0_server, {**_body(0, 0, 0, seed=1), **change}, field)


def test_num_actions_takes_the_chunks_first_actions(pi0_server):
    whole = post_actions(pi0_server, _body(0, 1, 0, seed=9))["actions"]
    assert (
        post_actions(pi0_server, {**_body(0, 1, 0, seed=9), "num_actions": 2})["actions"]
        == whole[:2]
    )


def test_pi05_openpi_layout_equals_the_spec_reference(pi05_server):
    folder = pi0_model_path("pi05", "openpi")
    reference, tokenizer = ref.SpecReference(folder, "pi05"), family_tokenizer(folder)
    stats = json.loads((folder / "assets" / "tiny" / "norm_stats.json").read_text())["norm_stats"]
    q01, q99 = (np.asarray(stats["state"][k], dtype=np.float32) for k in ("q01", "q99"))
    a01, a99 = (np.asarray(stats["actions"][k], dtype=np.float32) for k in ("q01", "q99"))
    for n, (c, i, s) in enumerate(CASES[::3]):
        normalized = (np.asarray(STATES[s], np.float32) - q01) / (q99 - q01 + 1e-6) * 2 - 1
        bins = np.digitize(normalized, np.linspace(-1, 1, 257)[:-1]) - 1
        task = INSTRUCTIONS[i].strip().replace("_", " ")
        text = f"Task: {task}, State: {' '.join(map(str, bins))};\nAction: "
        pixels, present = _pixels(c)
        chunk = reference.sample(pixels, present, tokenizer(text)["input_ids"], None,
                                 _noise(7 + n)[0])  # fmt: skip
        expected = (chunk[:, :ACTION_DIM].numpy() + 1) / 2 * (a99 - a01 + 1e-6) + a01
        out = post_actions(pi05_server, _body(c, i, s, seed=7 + n))
        np.testing.assert_allclose(np.asarray(out["actions"]), expected, rtol=0, atol=1e-4)


def test_generate_and_the_openpi_websocket_give_the_same_chunk(pi0_server):
    frames = {name: CAMERA_SETS[0][name] for name in CAMERAS}
    same_chunk_through_three_doors(pi0_server, frames, INSTRUCTIONS[0], STATES[1], CHUNK, 21)


def test_a_shorter_image_list_masks_the_cameras_after_it(pi0_server):
    """A list with fewer images than cameras is the first cameras; the rest are masked, as a
    map that leaves them out."""
    frame = png_base64(CAMERA_SETS[2][CAMERAS[0]])
    by_name = post_actions(pi0_server, _body(2, 1, 0, seed=31))["actions"]
    listed = post_actions(pi0_server, {**_body(2, 1, 0, seed=31), "image_data": [frame]})["actions"]
    assert listed == by_name
