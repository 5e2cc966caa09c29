"""An action decode that fails reaches the client as an error, end to end.

The checkpoint is the demo VLA with one more unnorm key, `nan_arm`, whose q01 is NaN in a masked
dimension (statistics are kept as given at load time: a bad key fails the requests that use it,
not the model). Requests for that key on `/generate` (one reply and a stream) and `/v1/actions`
(one reply and a stream) must end with an error naming the key and the problem, must carry no
action vectors (never zeros: zero un-normalises to a mid-range command), must leave no request or
KV behind, and the node must keep serving the good keys.
"""

from __future__ import annotations

import json
import math
import shutil
from typing import Any

import httpx
import numpy as np
import pytest

from tests.support.actions import openvla_decode, read_action_config
from tests.support.images import png_base64, random_rgb
from tests.support.server import run_server, wait_idle
from tests.support.sse import sse_events, stream_generate
from vla_server.policies.llava.demo import demo_model_path

BAD_KEY, BAD_DIM = "nan_arm", 2
NUM_ACTIONS = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The demo checkpoint plus an unnorm key with a NaN statistic."""
    path = tmp_path_factory.mktemp("nan-vla") / "model"
    shutil.copytree(demo_model_path(), path)
    spec_path = path / "action_tokenizer.json"
    spec = json.loads(spec_path.read_text())
    stats = json.loads(json.dumps(spec["norm_stats"]["demo_arm"]))
    assert stats["action"]["mask"][BAD_DIM], "the NaN must sit in a dimension that is used"
    stats["action"]["q01"][BAD_DIM] = math.nan
    spec["norm_stats"][BAD_KEY] = stats
    spec_path.write_text(json.dumps(spec))  # NaN as JSON's common extension, as json writes it
    return path


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    with run_server(folder, tmp_path_factory.mktemp("nan-vla-logs")) as s:
        yield s


def generate_body(key: str, seed: int) -> dict[str, Any]:
    return {
        "text": "pick up the red block <image>",
        "image_data": png_base64(random_rgb(64, 80, seed=seed)),
        "num_actions": NUM_ACTIONS,
        "unnorm_key": key,
        "sampling_params": {"temperature": 0},
    }


def actions_body(key: str, seed: int, **extra: Any) -> dict[str, Any]:
    return {
        "instruction": "pick up the red block",
        "image_data": png_base64(random_rgb(64, 80, seed=seed)),
        "unnorm_key": key,
        "num_actions": NUM_ACTIONS,
        **extra,
    }


def assert_names_the_problem(message: str) -> None:
    assert f"'{BAD_KEY}'" in message and "non-finite" in message, message
    assert f"dims [{BAD_DIM}]" in message, message


def assert_idle(server: Any, kv_used: int) -> None:
    """No request left in the front end or the scheduler, and no KV held for one."""
    with server.client() as c:
        info = wait_idle(c)
    assert info["num_pending_requests"] == 0
    assert info["internal_states"][0]["num_running_reqs"] == 0
    assert info["internal_states"][0]["num_waiting_reqs"] == 0
    assert info["kv_pool"]["used"] == kv_used


@pytest.fixture
def kv_used(server) -> int:
    with server.client() as c:
        return wait_idle(c)["kv_pool"]["used"]


def test_generate_reply_ends_with_an_action_error(server, kv_used):
    with server.client() as c:
        r = c.post("/generate", json=generate_body(BAD_KEY, seed=1))
    assert r.status_code == 200, r.text
    out = r.json()
    finish = out["meta_info"]["finish_reason"]
    assert finish["type"] == "action_error"
    assert_names_the_problem(finish["message"])
    assert out["actions"] == [] and out["meta_info"]["num_actions"] == 0
    assert_idle(server, kv_used)


def test_generate_stream_ends_with_an_action_error(server, kv_used):
    chunks = stream_generate(server, generate_body(BAD_KEY, seed=2))
    assert all(chunk["actions"] == [] for chunk in chunks)
    finishes = [c["meta_info"]["finish_reason"] for c in chunks]
    assert all(f is None for f in finishes[:-1])
    assert finishes[-1]["type"] == "action_error"
    assert_names_the_problem(finishes[-1]["message"])
    assert_idle(server, kv_used)


def test_actions_reply_is_an_error(server, kv_used):
    with server.client() as c:
        r = c.post("/v1/actions", json=actions_body(BAD_KEY, seed=3))
    assert r.status_code == 500, r.text
    error = r.json()["error"]
    assert error["type"] == "action_error" and "actions" not in r.json()
    assert_names_the_problem(error["message"])
    assert_idle(server, kv_used)


def actions_stream_error(server: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The error of a failing /v1/actions stream, after checking that no action came first.

    The failure is an SSE error event when the stream had started (the usual case: the first
    token arrives before the first action is complete), a 500 reply when it had not."""
    with httpx.Client(base_url=server.url, timeout=120) as client:
        r = client.post("/v1/actions", json={**body, "stream": True})
    if r.status_code == 500:
        return r.json()["error"]
    assert r.status_code == 200, r.text
    payloads = sse_events(r.text)
    assert "error" in payloads[-1], payloads[-1]
    assert all(p.get("actions") == [] for p in payloads[:-1])
    return payloads[-1]["error"]


def test_actions_stream_ends_with_an_error_event(server, kv_used):
    error = actions_stream_error(server, actions_body(BAD_KEY, seed=4))
    assert error["type"] == "action_error"
    assert_names_the_problem(error["message"])
    assert_idle(server, kv_used)


def test_node_keeps_serving_the_good_keys(server, folder, kv_used):
    for seed in (5, 6):  # each after a failure on the same node
        with server.client() as c:
            failed = c.post("/generate", json=generate_body(BAD_KEY, seed=seed)).json()
            r = c.post("/v1/actions", json=actions_body("demo_arm", seed, return_token_ids=True))
        assert failed["meta_info"]["finish_reason"]["type"] == "action_error"
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["finish_reason"] == "length" and out["num_actions"] == NUM_ACTIONS
        tokens = [t for action in out["action_token_ids"] for t in action]
        want = openvla_decode(tokens, read_action_config(folder), "demo_arm")
        np.testing.assert_allclose(np.asarray(out["actions"]), want, rtol=0, atol=1e-12)
    assert_idle(server, kv_used)
