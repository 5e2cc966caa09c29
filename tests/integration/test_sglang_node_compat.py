"""What SGLang's tools need of a node: SGLang's info and load routes, robot defaults that make a
plain SGLang request a robot request, and `--incremental-streaming-output` (deltas)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.actions import PROMPT, Demo, openvla_actions
from tests.support.images import image_payload, random_rgb
from tests.support.server import run_server, wait_idle
from tests.support.sse import stream_generate
from vla_server.policies.llava.demo import demo_model_path

DEFAULT_ACTIONS, DEFAULT_KEY = 2, "aloha_left"
ROBOT_FLAGS = (
    "--default-num-actions",
    str(DEFAULT_ACTIONS),
    "--default-unnorm-key",
    DEFAULT_KEY,
    "--default-deadline-ms",
    "600000",
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = demo_model_path()
    flags = (*ROBOT_FLAGS, "--incremental-streaming-output")
    with run_server(path, tmp_path_factory.mktemp("compat"), *flags) as server:
        yield Demo(path, server)


def sglang_body(seed: int, **extra: object) -> dict:
    """What sglang-router forwards of a robot's request: no robot field survives it."""
    image = image_payload(random_rgb(120, 160, seed=seed), "png")
    return {"text": PROMPT, "image_data": image, "sampling_params": {"temperature": 0}, **extra}


def test_a_plain_sglang_request_with_an_image_gets_the_nodes_robot_defaults(demo):
    dim = demo.spec["action_dim"]
    with demo.server.client() as c:
        out = c.post("/generate", json=sglang_body(1)).json()
        own = c.post("/generate", json=sglang_body(1, num_actions=1, unnorm_key="demo_arm")).json()
        text = c.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3}})
    assert len(out["output_ids"]) == DEFAULT_ACTIONS * dim
    assert out["meta_info"]["num_actions"] == DEFAULT_ACTIONS
    want = openvla_actions(out["output_ids"], demo.vocab_size, demo.spec, DEFAULT_KEY)
    np.testing.assert_allclose(np.asarray(out["actions"]), want, rtol=0, atol=1e-12)
    assert len(own["actions"]) == 1 and len(own["output_ids"]) == dim, "named fields win"
    # A request without an image is a language request: no actions, its own length.
    assert "actions" not in text.json() and len(text.json()["output_ids"]) == 3


def test_actions_route_and_chat(demo):
    with demo.server.client() as c:
        image = image_payload(random_rgb(120, 160, seed=2), "png")
        act = c.post("/v1/actions", json={"instruction": "pick", "image_data": image})
        chat = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
        )
    assert act.status_code == 200 and act.json()["unnorm_key"] == DEFAULT_KEY
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 4


def test_incremental_streaming_output_streams_deltas(demo):
    with demo.server.client() as c:
        whole = c.post("/generate", json=sglang_body(3)).json()
    chunks = stream_generate(demo.server, sglang_body(3))
    assert [t for ch in chunks for t in ch["output_ids"]] == whole["output_ids"]
    assert [a for ch in chunks for a in ch["actions"]] == whole["actions"]
    assert chunks[-1]["meta_info"]["num_actions"] == DEFAULT_ACTIONS


def test_sglang_info_and_load_routes(demo):
    with demo.server.client() as c:
        assert c.get("/model_info").json() == c.get("/get_model_info").json()
        info = c.get("/server_info").json()
        assert info["default_num_actions"] == DEFAULT_ACTIONS
        assert info["incremental_streaming_output"] is True
        wait_idle(c)
        (load,) = c.get("/get_load").json()
        models = c.get("/v1/models").json()["data"]
        assert c.get("/no/such/route").status_code == 404
        metrics = c.get("/metrics").text
    for route, status in (("/get_load", 200), ("/server_info", 200), ("unmatched", 404)):
        assert f'vla_http_requests_total{{route="{route}",status="{status}"}}' in metrics
    assert load == {"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}
    assert models[0]["root"] == str(demo.path)
