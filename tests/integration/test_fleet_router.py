"""Two demo nodes with robot defaults behind SGLang's own router (sglang-router 0.3.2).

The router rebuilds every request from its typed subset of SGLang's fields, so a robot request
through it carries only text with the image placeholder, `image_data` and `sampling_params`:
the nodes' robot defaults turn it back into one. Needs the node to accept every SGLang field
the router sends (`model`, `log_metrics`, ... at their defaults).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.actions import PROMPT
from tests.support.images import image_payload, random_rgb
from tests.support.sse import sse_events
from vla_server.fleet import Fleet, running_fleet
from vla_server.policies.llava.demo import demo_model_path

pytest.importorskip("sglang_router", reason="pip install sglang-router==0.3.2 (the test extra)")

N_ACTIONS = 2
ROBOT_FLAGS = ("--default-num-actions", str(N_ACTIONS), "--default-unnorm-key", "demo_arm")
SETTLE_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    # round_robin: a request that fails on one node is retried on the other (cache_aware
    # retries the same node until its circuit breaker opens).
    logs = tmp_path_factory.mktemp("fleet")
    with running_fleet(2, demo_model_path(), ROBOT_FLAGS, policy="round_robin", log_dir=logs) as f:
        yield f


def robot_body(seed: int, **extra: object) -> dict:
    image = image_payload(random_rgb(120, 160, seed=seed), "png")
    return {"text": PROMPT, "image_data": image, "sampling_params": {"temperature": 0}, **extra}


def http_counts(node_url: str) -> dict[tuple[str, str], float]:
    """The node's `vla_http_requests_total` by (route, status)."""
    out = {}
    for line in httpx.get(node_url + "/metrics").text.splitlines():
        if line.startswith("vla_http_requests_total{"):
            labels, value = line[len("vla_http_requests_total{") :].rsplit("} ", 1)
            pairs = dict(p.split("=", 1) for p in labels.split(","))
            out[(pairs["route"].strip('"'), pairs["status"].strip('"'))] = float(value)
    return out


def test_the_router_reads_sglangs_info_and_load_routes(fleet: Fleet):
    # Registration read /server_info and /model_info; the router's /get_loads asks every
    # worker's /get_load (its load monitor does too, but only every 30 s). The router's gRPC
    # probe (HTTP/2 `PRI *`) shows up as `unmatched` 404s: the node speaks HTTP/1.1.
    loads = httpx.get(fleet.router.url + "/get_loads", timeout=30)
    assert loads.status_code == 200, loads.text
    for node in fleet.nodes:
        counts = http_counts(node.url)
        for route in ("/server_info", "/model_info", "/get_load"):
            assert counts.get((route, "200"), 0) >= 1, counts
            assert not [k for k in counts if k[0] == route and k[1] != "200"], counts
        # SGLang's current names answered, so the router needed no fallback to /get_*.
        assert not [k for k in counts if k[0] in ("/get_server_info", "/get_model_info")]


def test_a_robot_request_through_the_router_comes_back_with_actions(fleet: Fleet):
    with httpx.Client(base_url=fleet.router.url, timeout=120) as c:
        models = c.get("/v1/models").json()["data"]
        outs = [c.post("/generate", json=robot_body(seed)) for seed in (1, 2)]
        streamed = c.post("/generate", json=robot_body(3, stream=True))
        chat = c.post(
            "/v1/chat/completions",
            json={
                "model": models[0]["id"],
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 4,
            },
        )
    assert models[0]["id"] == str(demo_model_path())  # the router's id: the node's model path
    for r in outs:
        assert r.status_code == 200, r.text
        assert len(r.json()["actions"]) == N_ACTIONS == r.json()["meta_info"]["num_actions"]
    assert streamed.status_code == 200, streamed.text
    chunks = sse_events(streamed.text)  # asserts the stream ends with [DONE]
    assert sum(len(ch["actions"]) for ch in chunks) == N_ACTIONS
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["completion_tokens"] == 4


def test_requests_keep_succeeding_after_a_node_is_killed(fleet: Fleet):
    fleet.nodes[0].kill()
    streak, needed = 0, 6  # three turns of round_robin over both nodes, all served
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    with httpx.Client(base_url=fleet.router.url, timeout=120) as c:
        while streak < needed:
            assert time.monotonic() < deadline, "the router never settled on the live node"
            r = c.post("/generate", json=robot_body(streak))
            streak = streak + 1 if r.status_code == 200 and r.json().get("actions") else 0
