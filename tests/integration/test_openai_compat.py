"""/v1/completions, chat logprobs and stream_options, and the SGLang/OpenAI schema fields, on a
live node serving the tiny Llama. The reference of every output is POST /generate on the same
token ids (itself checked against transformers in test_correctness_vs_transformers.py)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tests.support.sse import sse_events

GREEDY = {"temperature": 0, "ignore_eos": True}
TOL = 1e-4  # the same logits up to the batch they were computed in (prefix cache, batch size)
PROMPTS = [[1, 40, 41, 42, 43], [1, 50, 51, 52, 53, 54, 55]]


@pytest.fixture(scope="module")
def tok(llama_path):
    return AutoTokenizer.from_pretrained(llama_path)


def generate(server, ids: list[int], n: int, top: int = 0) -> dict:
    body = {
        "input_ids": ids,
        "return_logprob": True,
        "top_logprobs_num": top,
        "return_text_in_logprobs": True,
        "sampling_params": {"max_new_tokens": n, **GREEDY},
    }
    with server.client() as c:
        r = c.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def post(server, path: str, body: dict, status: int = 200):
    with server.client() as c:
        r = c.post(path, json=body)
    assert r.status_code == status, r.text
    return r


def test_completion_of_token_prompts_with_n(server):
    body = {"prompt": PROMPTS, "n": 2, "max_tokens": 6, **GREEDY}
    out = post(server, "/v1/completions", body).json()
    assert out["object"] == "text_completion"
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    refs = [generate(server, p, 6) for p in PROMPTS]
    for c in out["choices"]:
        assert c["text"] == refs[c["index"] // 2]["text"]
        assert c["finish_reason"] == "length" and c["logprobs"] is None
    usage = out["usage"]
    assert usage["prompt_tokens"] == sum(len(p) for p in PROMPTS)  # each prompt once
    assert usage["completion_tokens"] == 4 * 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_completion_of_text_defaults_to_16_tokens(server, tok):
    out = post(server, "/v1/completions", {"prompt": "pick up the cube", **GREEDY}).json()
    ids = tok("pick up the cube")["input_ids"]
    assert out["choices"][0]["text"] == generate(server, ids, 16)["text"]
    assert out["usage"]["completion_tokens"] == 16


def test_completion_logprobs_match_generate(server):
    body = {"prompt": PROMPTS[0], "max_tokens": 5, "logprobs": 2, **GREEDY}
    lp = post(server, "/v1/completions", body).json()["choices"][0]["logprobs"]
    ref = generate(server, PROMPTS[0], 5, top=2)["meta_info"]
    assert lp["tokens"] == [t[2] for t in ref["output_token_logprobs"]]
    assert lp["token_logprobs"] == pytest.approx(
        [t[0] for t in ref["output_token_logprobs"]], abs=TOL
    )
    want = [{a[2]: a[0] for a in top} for top in ref["output_top_logprobs"]]
    assert [list(d) for d in lp["top_logprobs"]] == [list(d) for d in want]
    for got, exp in zip(lp["top_logprobs"], want, strict=True):
        assert got == pytest.approx(exp, abs=TOL)
    offsets = [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    assert lp["text_offset"] == offsets


def test_completion_stream_with_usage_in_every_chunk(server):
    body = {"prompt": PROMPTS[1], "max_tokens": 7, "stream": True, **GREEDY}
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    events = sse_events(post(server, "/v1/completions", body).text)  # ends with [DONE]
    *chunks, last = events
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 7
    assert all(c["object"] == "text_completion" and c["usage"] is not None for c in chunks)
    assert (
        "".join(c["choices"][0]["text"] for c in chunks) == generate(server, PROMPTS[1], 7)["text"]
    )
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 7


def test_chat_logprobs_and_max_completion_tokens(server, tok):
    messages = [{"role": "user", "content": "move the arm"}]
    body = {"messages": messages, "logprobs": True, "top_logprobs": 2, **GREEDY}
    body |= {"max_tokens": 50, "max_completion_tokens": 4}  # the newer name wins
    out = post(server, "/v1/chat/completions", body).json()
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ref = generate(server, tok(text, add_special_tokens=False)["input_ids"], 4, top=2)
    choice = out["choices"][0]
    assert choice["message"]["content"] == ref["text"]
    assert out["usage"]["completion_tokens"] == 4
    content = choice["logprobs"]["content"]
    for entry, want, top in zip(
        content,
        ref["meta_info"]["output_token_logprobs"],
        ref["meta_info"]["output_top_logprobs"],
        strict=True,
    ):
        assert entry["token"] == want[2] and entry["logprob"] == pytest.approx(want[0], abs=TOL)
        assert entry["bytes"] == list(want[2].encode())
        assert [a["token"] for a in entry["top_logprobs"]] == [a[2] for a in top]
        assert [a["logprob"] for a in entry["top_logprobs"]] == pytest.approx(
            [a[0] for a in top], abs=TOL
        )


def test_chat_stream_usage(server):
    body = {
        "messages": [{"role": "user", "content": "lift"}],
        "max_tokens": 5,
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        **GREEDY,
    }
    *chunks, last = sse_events(post(server, "/v1/chat/completions", body).text)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 10
    roles = [c["choices"][0]["index"] for c in chunks if "role" in c["choices"][0]["delta"]]
    assert roles == [0, 1]
    texts = ["", ""]
    for c in chunks:
        texts[c["choices"][0]["index"]] += c["choices"][0]["delta"].get("content", "")
        assert "usage" in c
    assert texts[0] == texts[1] and texts[0]  # greedy: both samples alike
    finishes = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]
    ]
    assert finishes == ["length", "length"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"prompt": "x", "echo": True}, "echo"),
        ("/v1/completions", {"prompt": "x", "suffix": "y"}, "suffix"),
        ("/v1/completions", {"prompt": "x", "best_of": 3}, "best_of"),
        ("/v1/completions", {"prompt": "x", "max_tokns": 3}, "max_tokns"),
        ("/v1/completions", {"prompt": [[1, 2], "x"]}, "prompt"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "tools": [{}]},
            "tools",
        ),
    ],
)
def test_unsupported_unknown_and_mistyped_fields_are_400_naming_them(server, path, body, param):
    err = post(server, path, body, 400).json()["error"]
    assert err["param"] == param, err
    with server.client() as c:
        assert c.get("/get_server_info").json()["num_pending_requests"] == 0


def test_generate_takes_sglang_router_fields(server):
    router = {
        "model": "default",
        "log_metrics": True,
        "return_hidden_states": False,
        "background": False,
        "no_logs": False,
        "return_bytes": False,
        "return_entropy": False,
        "lora_path": None,
        "return_routed_experts": False,
    }
    body = {"input_ids": PROMPTS[0], "sampling_params": {"max_new_tokens": 3, **GREEDY}}
    assert post(server, "/generate", {**body, **router}).json()["output_ids"]
    err = post(server, "/generate", {**body, "return_hidden_states": True}, 400).json()["error"]
    assert err["field"] == "return_hidden_states" and "not supported" in err["message"]
    bad = {**body, "sampling_params": {"regex": "a+"}}
    assert post(server, "/generate", bad, 400).json()["error"]["field"] == "sampling_params.regex"


def test_no_stop_trim_keeps_the_stop_string(server):
    full = generate(server, PROMPTS[1], 12)["text"]
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop.strip()
    params = {"max_new_tokens": 12, "stop": stop, **GREEDY}
    cut = post(server, "/generate", {"input_ids": PROMPTS[1], "sampling_params": params}).json()
    assert cut["text"] == full[: full.find(stop)]
    params["no_stop_trim"] = True
    kept = post(server, "/generate", {"input_ids": PROMPTS[1], "sampling_params": params}).json()
    assert kept["text"].startswith(cut["text"] + stop)
