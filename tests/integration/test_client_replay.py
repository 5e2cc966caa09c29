"""Request bodies exactly as third-party clients sent them, replayed against a demo node.

The fixtures in tests/fixtures/client_requests/ were recorded by
`python -m vla_server.bench ecosystem --capture tests/fixtures/client_requests`: each tool ran
against a demo node through a recording proxy (SGLang 0.5.23's `bench_serving` with its `sglang`
and `sglang-oai-chat` backends, guidellm 0.8.1, genai-bench 0.0.5 with its `sglang` backend),
and sglang-router 0.3.2 forwarded a robot's requests and made its registration, health and load
calls through one. Each body is replayed unchanged (the recorded `model` aside: it names the
served model, whose path differs between machines) and its answer must have the shape that
client parses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import run_server
from tests.support.sse import sse_events
from vla_server.policies.llava.demo import demo_model_path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "client_requests"
TOOLS = sorted(p.stem for p in FIXTURES.glob("*.json"))
# The node flags the bodies were recorded against (vla_server.bench.ecosystem.NODE_FLAGS).
NUM_ACTIONS = 2
ROBOT_FLAGS = ("--default-num-actions", str(NUM_ACTIONS), "--default-unnorm-key", "demo_arm")


def recorded() -> list[Any]:
    cases = []
    for tool in TOOLS:
        for i, req in enumerate(json.loads((FIXTURES / f"{tool}.json").read_text())):
            cases.append(pytest.param(req, id=f"{tool}-{i}-{req['method']}{req['path']}"))
    return cases


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with run_server(demo_model_path(), tmp_path_factory.mktemp("replay"), *ROBOT_FLAGS) as s:
        yield s


def test_every_tool_was_recorded():
    assert TOOLS == [
        "bench_serving_sglang",
        "bench_serving_sglang_oai_chat",
        "genai_bench",
        "guidellm",
        "sglang_router",
    ]


@pytest.mark.parametrize("req", recorded())
def test_a_recorded_request_gets_what_its_client_parses(node, req):
    body = req["body"]
    if isinstance(body, dict) and body.get("model") is not None:
        body = {**body, "model": str(demo_model_path())}
    with node.client() as c:
        r = c.request(req["method"], req["path"], json=body)
        assert r.status_code == 200, r.text
        if req["method"] == "GET":
            check_info(req["path"], r)
        elif body.get("stream"):
            whole = c.post(req["path"], json=unstreamed(body))
            assert whole.status_code == 200, whole.text
            check_stream(req["path"], body, sse_events(r.text), whole.json())
        else:
            check_whole(req["path"], body, r.json())


def unstreamed(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def check_info(path: str, r: Any) -> None:
    if path == "/health":
        return
    got = r.json()
    if path == "/get_load":  # sglang-router sums num_tokens over the list
        assert set(got[0]) >= {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}
    elif path in ("/server_info", "/model_info"):  # the router reads the model path
        assert got["model_path"] == str(demo_model_path())
    elif path == "/v1/models":  # bench_serving's readiness check
        assert got["object"] == "list" and got["data"][0]["object"] == "model"
    else:
        raise AssertionError(f"no check for GET {path}")


def wanted_tokens(body: dict[str, Any]) -> int | None:
    """The exact length a client asked for (it set ignore_eos), else None."""
    params = body.get("sampling_params", body)
    if not params.get("ignore_eos"):
        return None
    return (
        params.get("max_new_tokens") or params.get("max_completion_tokens") or params["max_tokens"]
    )


def greedy(body: dict[str, Any]) -> bool:
    return body.get("sampling_params", body).get("temperature") == 0


def check_whole(path: str, body: dict[str, Any], got: dict[str, Any]) -> None:
    if path == "/generate":
        assert isinstance(got["text"], str) and got["output_ids"]
        assert got["meta_info"]["completion_tokens"] == len(got["output_ids"])
        if "image_data" in body:  # the node's robot defaults made it a robot request
            assert len(got["actions"]) == NUM_ACTIONS
        return
    choice = got["choices"][0]
    text = choice["message"]["content"] if path.endswith("chat/completions") else choice["text"]
    assert isinstance(text, str) and got["usage"]["completion_tokens"] > 0


def check_stream(
    path: str, body: dict[str, Any], chunks: list[dict[str, Any]], whole: dict[str, Any]
) -> None:
    if path == "/generate":
        # bench_serving keeps each chunk's `text` and counts meta_info.completion_tokens of
        # the last: SGLang streams the whole text so far in every chunk.
        last = chunks[-1]
        texts = [ch["text"] for ch in chunks]
        assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
        n = last["meta_info"]["completion_tokens"]
        assert n == len(last["output_ids"])
        if greedy(body):
            assert last["text"] == whole["text"]
        if "image_data" in body:
            assert last["meta_info"]["num_actions"] == NUM_ACTIONS
    else:
        text = "".join(
            ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"]
        )
        if greedy(body):
            assert text == whole["choices"][0]["message"]["content"]
        n = check_usage(body, chunks)
    if n is not None and wanted_tokens(body) is not None:
        assert n == wanted_tokens(body)


def check_usage(body: dict[str, Any], chunks: list[dict[str, Any]]) -> int | None:
    """OpenAI's stream_options: the usage chunk last (include_usage), and usage in every
    chunk (continuous_usage_stats, guidellm's way of counting tokens as they come). Without
    them no chunk has usage (bench_serving then counts the tokens it asked for)."""
    options = body.get("stream_options") or {}
    if not options.get("include_usage"):
        assert all(ch.get("usage") is None for ch in chunks)
        return None
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] > 0
    if options.get("continuous_usage_stats"):
        counts = [ch["usage"]["completion_tokens"] for ch in chunks]
        assert counts == sorted(counts)
    return final["usage"]["completion_tokens"]
