"""POST /v1/actions on a live node serving the demo VLA.

References: transformers' own LLaVA generation constrained to the action bins (a logits
processor) on the checkpoint's processor with the promised layout (instruction first, images
last), decoded with OpenVLA's published formula on the statistics read from
`action_tokenizer.json`; and the tokenizer's own chat template for the prompt the server builds.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from tests.support.actions import (
    bin_range,
    demo_path,
    instruction_messages,
    openvla_decode,
    read_action_config,
)
from tests.support.hf_reference import HFLlava
from tests.support.images import png_base64, random_rgb
from tests.support.server import module_server, wait_idle
from tests.support.sse import sse_events

INSTRUCTION = "pick up the red block"


server = module_server()


@pytest.fixture(scope="module")
def hf():
    return HFLlava(demo_path())


@pytest.fixture(scope="module")
def cfg():
    return read_action_config(demo_path())


def post(server, body: dict) -> dict:
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_actions_equal_constrained_transformers_decoded_by_openvla(server, cfg, hf):
    images = [random_rgb(224, 224, seed=5), random_rgb(224, 224, seed=6)]
    n = 3
    ref = hf.generate(
        instruction_messages(INSTRUCTION, 2), images, n * cfg["action_dim"], bin_range(cfg)
    )
    out = post(
        server,
        {
            "instruction": INSTRUCTION,
            "image_data": [png_base64(im) for im in images],
            "unnorm_key": "aloha_left",
            "num_actions": n,
            "return_token_ids": True,
        },
    )
    assert out["object"] == "actions" and out["unnorm_key"] == "aloha_left"
    assert out["action_dim"] == cfg["action_dim"] and out["num_actions"] == n
    assert out["finish_reason"] == "length"
    assert out["usage"]["prompt_tokens"] == ref.prompt_len
    tokens = [t for action in out["action_token_ids"] for t in action]
    sure = ref.steps_before_tie() // cfg["action_dim"]  # actions decided by a clear margin
    assert tokens[: sure * cfg["action_dim"]] == ref.tokens[: sure * cfg["action_dim"]]
    actions = np.asarray(out["actions"])
    np.testing.assert_allclose(
        actions, openvla_decode(tokens, cfg, "aloha_left"), rtol=0, atol=1e-12
    )
    timing = out["timing"]
    assert timing["action_done_ms"] == sorted(timing["action_done_ms"])
    assert len(timing["action_done_ms"]) == n
    assert 0 <= timing["prompt_ms"] <= timing["time_to_first_token_ms"] <= timing["e2e_ms"]
    # the main process decoded and resized the image, then the request waited for a forward
    assert timing["preprocess_ms"] > 0 and timing["queue_ms"] >= 0
    assert timing["preprocess_ms"] + timing["queue_ms"] <= timing["time_to_first_token_ms"]
    assert timing["time_to_first_action_ms"] <= timing["e2e_ms"]


def test_stream_sends_each_action_once_then_the_summary(server, cfg):
    body = {
        "instruction": INSTRUCTION,
        "image_data": png_base64(random_rgb(224, 224, seed=7)),
        "unnorm_key": "demo_arm",
        "num_actions": 4,
    }
    full = post(server, body)
    with server.client() as c:
        r = c.post("/v1/actions", json={**body, "stream": True, "return_token_ids": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert all(e["actions"] for e in events[:-1]), "only events that carry actions (or the last)"
    assert [e["index"] for e in events] == [
        sum(len(p["actions"]) for p in events[:i]) for i in range(len(events))
    ]
    streamed = [a for e in events for a in e["actions"]]
    assert streamed == full["actions"]
    assert [e["num_actions"] for e in events][-1] == 4
    assert all(e["finish_reason"] is None for e in events[:-1])
    last = events[-1]
    assert last["finish_reason"] == "length" and last["unnorm_key"] == "demo_arm"
    assert len(last["timing"]["action_done_ms"]) == 4
    tokens = [t for e in events for a in e["action_token_ids"] for t in a]
    np.testing.assert_allclose(np.asarray(streamed), openvla_decode(tokens, cfg, "demo_arm"))


def test_masked_dims_stay_in_the_statistics_range(server, cfg):
    out = post(
        server,
        {
            "instruction": "open the drawer",
            "image_data": png_base64(random_rgb(224, 224, seed=8)),
            "unnorm_key": "demo_arm",
            "num_actions": 5,
        },
    )
    stats = cfg["norm_stats"]["demo_arm"]["action"]
    actions = np.asarray(out["actions"])
    assert actions.shape == (5, cfg["action_dim"]) and np.isfinite(actions).all()
    mask = np.asarray(stats["mask"])
    assert (actions[:, mask] >= np.asarray(stats["q01"])[mask]).all()
    assert (actions[:, mask] <= np.asarray(stats["q99"])[mask]).all()
    assert (np.abs(actions[:, ~mask]) <= 1.0).all()


def test_instruction_prefix_is_reused_across_frames(server, hf):
    """Instruction first, image last: a new frame reuses the KV of everything before the image."""
    instruction = "move the arm to the left of the green bowl and wait"
    ids = hf.prompt_ids(instruction_messages(instruction, 1))
    image_token = hf.processor.tokenizer.convert_tokens_to_ids(hf.processor.image_token)
    before_image = ids.index(image_token)
    outs = [
        post(
            server,
            {
                "instruction": instruction,
                "image_data": png_base64(random_rgb(224, 224, seed=s)),
                "unnorm_key": "demo_arm",
            },
        )
        for s in (20, 21)
    ]
    assert outs[1]["usage"]["cached_tokens"] >= before_image
    assert outs[1]["actions"] != outs[0]["actions"], "the frame must steer the action"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"unnorm_key": "no_robot"}, "unnorm_key"),
        ({"num_actions": 0}, "num_actions"),
        ({"num_actions": 100000}, "num_actions"),
        ({"image_data": None}, "image_data"),
        ({"image_data": "not base64!"}, "image_data[0]"),
        ({"image_data": {"shape": [2, 2, 3], "dtype": "uint8", "data": "AAAA"}}, "image_data[0]"),
        ({"mm_hashes": ["00" * 16, "11" * 16]}, "mm_hashes"),
        ({"instruction": "  "}, "instruction"),
        ({"temperature": -1}, "temperature"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_input_is_400_naming_the_field(server, change, field):
    good = {
        "instruction": INSTRUCTION,
        "image_data": png_base64(random_rgb(32, 32, seed=9)),
        "unnorm_key": "demo_arm",
    }
    with server.client() as c:
        r = c.post("/v1/actions", json={**good, **change})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"] == field
        assert c.get("/get_server_info").json()["num_pending_requests"] == 0
        ok = c.post("/v1/actions", json=good)
    assert ok.status_code == 200 and len(ok.json()["actions"]) == 1


def test_client_disconnect_mid_stream_frees_the_request(server):
    body = {
        "instruction": INSTRUCTION,
        "image_data": png_base64(random_rgb(224, 224, seed=30)),
        "unnorm_key": "demo_arm",
        "num_actions": 200,
        "stream": True,
    }
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/v1/actions", json=body) as r:
            first = next(line for line in r.iter_lines() if line.startswith("data: "))
        assert len(json.loads(first[len("data: ") :])["actions"]) >= 1
        info = wait_idle(c)
    assert info["num_pending_requests"] == 0
    assert info["internal_states"][0]["num_running_reqs"] == 0
