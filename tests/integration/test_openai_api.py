"""The OpenAI-compatible API on a live node serving the demo VLA, driven by the `openai` package.

References: transformers' own LLaVA (`generate` on the checkpoint's processor and chat template)
for a streamed chat with an image, and the chat template applied by the tokenizer itself for the
prompt a multi-turn request must become (its output then equals POST /generate on those ids).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.actions import demo_path
from tests.support.hf_reference import HFLlava
from tests.support.images import png_base64, random_rgb
from tests.support.server import module_server, wait_idle

server = module_server()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def test_models_lists_the_served_checkpoint(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [demo_path().name]
    with server.client() as c:
        card = c.get("/v1/models").json()["data"][0]
        info = c.get("/get_model_info").json()
    assert card["object"] == "model"
    assert card["max_model_len"] == info["context_len"]
    assert card["root"] == info["model_path"]


def test_streamed_chat_with_an_image_equals_transformers(client, model_id):
    image = random_rgb(224, 224, seed=3)
    text = "pick up the red block and put it on the plate"
    hf = HFLlava(demo_path())
    ref = hf.generate(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}],
        [image],
        max_new_tokens=10,
    )
    stream = client.chat.completions.create(
        model=model_id,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{png_base64(image)}"},
                    },
                    {"type": "text", "text": text},
                ],
            }
        ],
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    choice_chunks = [c for c in chunks if c.choices]
    usage_chunks = [c for c in chunks if not c.choices]
    assert len(usage_chunks) == 1 and chunks[-1] is usage_chunks[0], "usage comes last"
    finishes = [c.choices[0].finish_reason for c in choice_chunks]
    assert all(f is None for f in finishes[:-1])
    content = "".join(c.choices[0].delta.content or "" for c in choice_chunks)
    sure = ref.steps_before_tie()
    ref_text = hf.processor.tokenizer.decode(ref.tokens[:sure], skip_special_tokens=True)
    assert content.startswith(ref_text)
    if sure == len(ref.tokens):
        assert content == ref_text
        assert finishes[-1] == ("length" if len(ref.tokens) == 10 else "stop")
    usage = usage_chunks[0].usage
    assert usage.prompt_tokens == ref.prompt_len
    assert usage.completion_tokens == len(ref.tokens)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_multi_turn_sampling_equals_generate_on_the_template(client, model_id, server):
    messages = [
        {"role": "system", "content": "You control a 7-dof arm."},
        {"role": "user", "content": "open the drawer"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "now close it slowly"}]},
    ]
    params = {"temperature": 0.8, "top_p": 0.9, "seed": 11}
    reply = client.chat.completions.create(
        model=model_id, messages=messages, max_completion_tokens=12, **params
    )
    ids = HFLlava(demo_path()).prompt_ids(messages)
    with server.client() as c:
        ref = c.post(
            "/generate",
            json={"input_ids": ids, "sampling_params": {**params, "max_new_tokens": 12}},
        ).json()
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == ref["text"]
    assert reply.choices[0].finish_reason == ref["meta_info"]["finish_reason"]["type"]
    assert reply.usage.prompt_tokens == len(ids) == ref["meta_info"]["prompt_tokens"]
    assert reply.usage.completion_tokens == len(ref["output_ids"])


def test_stop_string_ends_the_completion(client, model_id, server):
    messages = [{"role": "user", "content": "stack the green block"}]
    free = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=16, temperature=0
    )
    text = free.choices[0].message.content
    assert len(text) > 4
    stop = text[2:4]
    cut = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=16, temperature=0, stop=stop
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[: text.index(stop)]


def _raw(server, body: dict, status: int) -> dict:
    with server.client() as c:
        r = c.post("/v1/chat/completions", content=json.dumps(body))
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}], "n": 0}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "lora_path": "a"}, "lora_path"),
        ({"messages": [{"role": "user", "content": "x"}], "tempreature": 0}, "tempreature"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
        (
            {"messages": [{"role": "user", "content": "x"}], "stream_options": {}},
            "stream_options",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "audio", "text": "x"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "x"},
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/png;base64,AAAA"},
                            },
                        ],
                    }
                ]
            },
            "messages[0].content[1].image_url",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": "https://example.com/a.png"}
                        ],
                    }
                ]
            },
            "messages[0].content[0].image_url",
        ),
    ],
)
def test_bad_requests_are_400_naming_the_param(server, body, param):
    err = _raw(server, body, 400)
    assert err["param"] == param
    assert err["type"] == "invalid_request_error"


def test_malformed_json_and_unknown_model(server, client):
    with server.client() as c:
        r = c.post("/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    assert info.value.code == "model_not_found" and info.value.param == "model"


def test_node_keeps_serving_after_bad_input(server, client, model_id):
    for body in ({"messages": "x"}, {"messages": [{"role": "user"}], "n": 0}):
        _raw(server, body, 400)
    reply = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "lift"}], max_tokens=3
    )
    assert reply.usage.completion_tokens >= 1
    with server.client() as c:
        assert c.get("/get_server_info").json()["num_pending_requests"] == 0


def test_client_disconnect_mid_stream_frees_the_request(server, model_id):
    body = {
        "model": model_id,
        "messages": [{"role": "user", "content": "slide the sponge"}],
        "max_tokens": 400,
        "stream": True,
    }
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
        info = wait_idle(c)
    assert info["num_pending_requests"] == 0
    assert info["internal_states"][0]["num_running_reqs"] == 0
