"""The HTTP API on a live node: streaming, batches, embeddings, bad input, info and metrics."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from safetensors.torch import load_file

from tests.support.server import idle_state
from tests.support.sse import sse_events

GREEDY = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}


def wait_pending(client) -> None:
    """Until the front end holds a request in flight."""
    deadline = time.monotonic() + 30
    while client.get("/get_server_info").json()["num_pending_requests"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_stream_concat_equals_non_stream(server):
    params = {
        "temperature": 0.9,
        "top_p": 0.95,
        "seed": 7,
        "max_new_tokens": 40,
        "ignore_eos": True,
    }
    with server.client() as c:
        full = c.post(
            "/generate", json={"text": "pick up the red cube", "sampling_params": params}
        ).json()
        resp = c.post(
            "/generate",
            json={"text": "pick up the red cube", "sampling_params": params, "stream": True},
        )
    assert resp.headers["content-type"].startswith("text/event-stream")
    chunks = sse_events(resp.text)
    assert len(chunks) >= 2
    # SGLang's default: every chunk carries the text and ids so far.
    assert chunks[-1]["text"] == full["text"] and chunks[-1]["output_ids"] == full["output_ids"]
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b["text"].startswith(a["text"])
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    assert all(ch["meta_info"]["finish_reason"] is None for ch in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 40}
    assert (
        last["completion_tokens"] == 40
        and last["prompt_tokens"] == full["meta_info"]["prompt_tokens"]
    )
    assert {"id", "cached_tokens", "e2e_latency"} <= set(last)


def test_seeded_sampling_is_reproducible_and_seed_sensitive(server):
    def run(seed: int) -> list[int]:
        params = {"temperature": 1.0, "seed": seed, "max_new_tokens": 16, "ignore_eos": True}
        with server.client() as c:
            return c.post(
                "/generate", json={"text": "open the drawer", "sampling_params": params}
            ).json()["output_ids"]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_batch_of_prompts_matches_single_requests(server):
    texts = ["pick", "move the arm to the left", "close the gripper slowly and lift the cup"]
    with server.client() as c:
        batch = c.post("/generate", json={"text": texts, "sampling_params": GREEDY}).json()
        singles = [
            c.post("/generate", json={"text": t, "sampling_params": GREEDY}).json() for t in texts
        ]
    assert isinstance(batch, list) and len(batch) == 3
    assert [b["output_ids"] for b in batch] == [s["output_ids"] for s in singles]


def test_input_embeds_equal_token_ids(server, llama_path):
    weights = load_file(str(llama_path / "model.safetensors"))
    table = weights["model.embed_tokens.weight"]
    ids = [85, 289, 430, 391, 422]
    embeds = table[torch.tensor(ids)].tolist()
    with server.client() as c:
        by_ids = c.post("/generate", json={"input_ids": ids, "sampling_params": GREEDY}).json()
        by_embeds = c.post(
            "/generate", json={"input_embeds": embeds, "sampling_params": GREEDY}
        ).json()
    assert by_embeds["output_ids"] == by_ids["output_ids"]
    assert by_embeds["meta_info"]["prompt_tokens"] == len(ids)


LONG = "pick up the cube " * 200  # far beyond the 512-token context


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"text": "abc"', "body"),
        (b"[1, 2]", None),
        ({"sampling_params": GREEDY}, "text"),
        ({"text": "a", "input_ids": [1, 2]}, "input_ids"),
        ({"input_embeds": [[0.1] * 7]}, "input_embeds"),
        ({"text": "a", "frobnicate": 1}, "frobnicate"),
        ({"text": 5}, "text"),
        ({"text": "a", "stream": "yes"}, "stream"),
        (
            {"text": "a", "sampling_params": {"max_new_tokens": "x"}},
            "sampling_params.max_new_tokens",
        ),
        (
            {"text": "a", "sampling_params": {"max_new_tokens": -1}},
            "sampling_params.max_new_tokens",
        ),
        ({"text": "a", "sampling_params": {"temperature": -0.5}}, "sampling_params.temperature"),
        ({"text": "a", "sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
        ({"text": "a", "sampling_params": {"top_p": 1.5}}, "sampling_params.top_p"),
        ({"text": "a", "sampling_params": {"top_k": 0}}, "sampling_params.top_k"),
        ({"text": "a", "sampling_params": {"top_k": -2}}, "sampling_params.top_k"),
        ({"text": "a", "sampling_params": {"bogus": 1}}, "sampling_params.bogus"),
        ({"input_ids": [1, 2, 100000]}, "input_ids"),
        ({"input_ids": [1, -3]}, "input_ids"),
        ({"input_ids": []}, "input_ids"),
        ({"text": LONG}, "text"),
        ({"text": "a", "logprob_start_len": -5}, "logprob_start_len"),
        ({"text": ["a", "b"], "sampling_params": [GREEDY]}, "sampling_params"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(server, body, field):
    with server.client() as c:
        before = idle_state(c)
        if isinstance(body, bytes):
            r = c.post("/generate", content=body, headers={"content-type": "application/json"})
        else:
            r = c.post("/generate", json=body)
        assert 400 <= r.status_code < 500, r.text
        err = r.json()["error"]
        assert err["message"]
        if field is not None:
            assert err["field"] == field, err
        if body == {"text": LONG}:
            assert "512" in err["message"]
        ok = c.post("/generate", json={"text": "pick", "sampling_params": GREEDY})
        assert ok.status_code == 200
        assert idle_state(c) == before


def test_duplicate_rid_in_flight_is_rejected(server):
    result: dict = {}

    def long_stream() -> None:
        with (
            server.client() as c,
            c.stream(
                "POST",
                "/generate",
                json={
                    "text": "pick",
                    "rid": "dup-1",
                    "stream": True,
                    "sampling_params": {
                        "max_new_tokens": 200,
                        "ignore_eos": True,
                        "temperature": 0,
                    },
                },
            ) as r,
        ):
            result["status"] = r.status_code
            result["body"] = r.read()

    # Paused, the node holds the first request in flight (its rid registered) for as long as
    # the check takes: a running one could finish before the duplicate arrives.
    with server.client() as c:
        assert c.post("/pause_generation", json={"mode": "in_place"}).status_code == 200
        t = threading.Thread(target=long_stream)
        t.start()
        try:
            wait_pending(c)
            dup = c.post("/generate", json={"text": "pick", "rid": "dup-1"})
        finally:
            assert c.post("/continue_generation").status_code == 200
        assert dup.status_code == 400 and dup.json()["error"]["field"] == "rid"
        assert "already in flight" in dup.json()["error"]["message"]
    t.join(60)
    assert result["status"] == 200 and b"[DONE]" in result["body"]
    with server.client() as c:  # after it finished, the rid is free again
        assert (
            c.post(
                "/generate", json={"text": "pick", "rid": "dup-1", "sampling_params": GREEDY}
            ).status_code
            == 200
        )


def test_info_routes_and_health(server):
    with server.client() as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/health_generate").status_code == 200
        info = c.get("/get_model_info").json()
        assert info["architectures"] == ["LlamaForCausalLM"] and info["context_len"] == 512
        server_info = c.get("/get_server_info").json()
        assert server_info["kv_pool"]["total"] == 4096
        pool = server_info["kv_pool"]
        assert pool["used"] + pool["free"] + pool["cached"] == 4096
        assert pool["used"] == 0 and pool["cached"] > 0  # idle; earlier prompts stay cached
        assert server_info["max_running_requests"] == 16
        assert server_info["num_pending_requests"] == 0


def test_metrics_histograms(server):
    with server.client() as c:
        c.post("/generate", json={"text": "pick", "stream": True, "sampling_params": GREEDY})
        text = c.get("/metrics").text
    for name in (
        "vla_time_to_first_token_seconds",
        "vla_inter_token_latency_seconds",
        "vla_e2e_request_latency_seconds",
        "vla_queue_time_seconds",
    ):
        count = next(line for line in text.splitlines() if line.startswith(name + "_count"))
        assert float(count.split()[-1]) > 0, name
    # control-loop resolution: buckets between 10 and 20 ms, and between 40 and 60 ms
    assert 'vla_inter_token_latency_seconds_bucket{le="0.0125",priority="0"}' in text
    assert 'vla_inter_token_latency_seconds_bucket{le="0.045",priority="0"}' in text
    assert "vla_num_running_reqs" in text and "vla_generation_tokens_total" in text


def test_abort_request_ends_a_running_stream(server):
    result: dict = {}

    def stream() -> None:
        with server.client() as c:
            result["chunks"] = sse_events(
                c.post(
                    "/generate",
                    json={
                        "text": "pick",
                        "rid": "to-abort",
                        "stream": True,
                        "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
                    },
                ).text
            )

    t = threading.Thread(target=stream)
    t.start()
    with server.client() as c:
        wait_pending(c)
        assert c.post("/abort_request", json={"rid": "to-abort"}).json()["found"] is True
        t.join(30)
        assert result["chunks"][-1]["meta_info"]["finish_reason"]["type"] == "abort"
        assert result["chunks"][-1]["meta_info"]["completion_tokens"] < 400
        assert idle_state(c)["pending"] == 0
        assert c.post("/abort_request", json={}).status_code == 400
        assert c.post("/flush_cache").json()["success"] is True


def test_stop_strings_and_stop_token_ids(server):
    base = {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}
    with server.client() as c:
        full = c.post("/generate", json={"text": "move the arm", "sampling_params": base}).json()
        text, ids = full["text"], full["output_ids"]
        stop = text[len(text) // 2 : len(text) // 2 + 3]
        assert stop.strip() and text.find(stop) > 0
        for stream in (False, True):
            body = {
                "text": "move the arm",
                "stream": stream,
                "sampling_params": {**base, "stop": [stop]},
            }
            r = c.post("/generate", json=body)
            if stream:
                chunks = sse_events(r.text)
                got, fin = chunks[-1]["text"], chunks[-1]["meta_info"]["finish_reason"]
            else:
                got, fin = r.json()["text"], r.json()["meta_info"]["finish_reason"]
            assert got == text[: text.find(stop)]
            assert fin == {"type": "stop", "matched": stop}
        tid = ids[4]
        r = c.post(
            "/generate",
            json={"text": "move the arm", "sampling_params": {**base, "stop_token_ids": [tid]}},
        ).json()
        assert r["output_ids"] == ids[: ids.index(tid) + 1]
        assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": tid}
