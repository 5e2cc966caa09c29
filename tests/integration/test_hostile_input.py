# ruff: noqa: E501  (one hostile case per line reads as a table)
"""Hostile requests on every route: each is a 4xx with a JSON error naming the field, answered
within the client's 10 s timeout, and the node is unchanged, healthy and generating afterwards.

Written from the outside (as an attacker probes): malformed and deeply nested JSON, integers
beyond 64 bits, NaN/Infinity literals, numbers beyond a double, lone surrogates, oversized
arrays and strings, local paths, `file://` and remote URLs with fetching off, unknown fields,
wrong types, on /generate, the OpenAI routes, /v1/actions, the session and control routes and
the openpi WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import msgpack
import psutil
import pytest
import websockets

from tests.support.images import image_payload, random_rgb
from tests.support.server import idle_state, run_server
from vla_server.policies.llava.demo import demo_model_path

DEEP = 10_000
BIG = 10**20  # beyond int64 and uint64
HUGE = 10**29
IMAGE = image_payload(random_rgb(24, 32, seed=1), "png")
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
ACT = {"instruction": "pick up the cube", "image_data": IMAGE}


def deep(inner: str = "1") -> str:
    return "[" * DEEP + inner + "]" * DEEP


# (route, body: dict or raw JSON text, the field the error must name)
# fmt: off
CASES: list[tuple[str, Any, str]] = [
    # ---- /generate ---------------------------------------------------------------------------
    ("/generate", '{"text": "a", "sampling_params": ' + deep() + "}", "body"),
    ("/generate", '{"text": ' + deep('"a"') + "}", "body"),
    ("/generate", '{"text": "a", "sampling_params": {"temperature": NaN}}', "body"),
    ("/generate", '{"text": "a", "sampling_params": {"top_p": Infinity}}', "body"),
    ("/generate", '{"text": "a", "sampling_params": {"temperature": 1e999}}', "body"),
    ("/generate", '{"text": "\\ud800"}', "body"),
    ("/generate", '{"text": "a"', "body"),
    ("/generate", "", "body"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": BIG}}, "sampling_params.max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 10**12}}, "sampling_params.max_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"min_new_tokens": -BIG}}, "sampling_params.min_new_tokens"),
    ("/generate", {"text": "a", "sampling_params": {"top_k": HUGE}}, "sampling_params.top_k"),
    ("/generate", {"text": "a", "sampling_params": {"n": 10**6}}, "sampling_params.n"),
    ("/generate", {"text": "a", "sampling_params": {"stop_token_ids": [BIG]}}, "sampling_params.stop_token_ids[0]"),
    ("/generate", {"text": "a", "sampling_params": {"logit_bias": {"1": BIG}}}, "sampling_params.logit_bias.1"),
    ("/generate", {"text": "a", "sampling_params": {"logit_bias": {"x": 1.0}}}, "sampling_params.logit_bias"),
    ("/generate", {"text": "a", "sampling_params": {"stop": ["x"] * 1000}}, "sampling_params.stop"),
    ("/generate", {"text": "a", "sampling_params": {"stop": ["x" * 100_000]}}, "sampling_params.stop"),
    ("/generate", {"text": "a", "priority": HUGE}, "priority"),
    ("/generate", {"text": "a", "deadline_ms": BIG}, "deadline_ms"),
    ("/generate", {"text": "a", "num_actions": BIG}, "num_actions"),
    ("/generate", {"input_ids": [BIG]}, "input_ids[0]"),
    ("/generate", {"input_ids": [1] * 100_000}, "input_ids"),
    ("/generate", {"input_ids": [[1, 2]] * 5000}, "input_ids"),
    ("/generate", {"text": ["a"] * 5000}, "text"),
    ("/generate", {"text": "x" * 2_000_000}, "text"),
    ("/generate", {"text": "<image>", "image_data": [IMAGE] * 100}, "image_data"),
    ("/generate", {"text": "<image>", "image_data": "/etc/passwd"}, "image_data[0]"),
    ("/generate", {"text": "<image>", "image_data": "../../../../etc/passwd"}, "image_data[0]"),
    ("/generate", {"text": "<image>", "image_data": "file:///etc/passwd"}, "image_data[0]"),
    ("/generate", {"text": "<image>", "image_data": "http://127.0.0.1:9/frame.png"}, "image_data[0]"),
    ("/generate", {"text": "<image>", "image_data": "/tmp/a\u0000.png"}, "image_data[0]"),
    ("/generate", {"text": "<image>", "image_data": {"shape": [BIG, 1, 3], "dtype": "uint8", "data": ""}}, "image_data.shape[0]"),
    ("/generate", {"text": "<image>", "image_data": {"shape": [1, 1, 3], "dtype": "uint8", "data": "AAAA" * 10}}, "image_data[0]"),
    ("/generate", {"text": "<image>", "image_data": IMAGE, "mm_hashes": ["zz"]}, "mm_hashes[0]"),
    ("/generate", {"text": "a", "session_params": {"id": 5}}, "session_params.id"),
    ("/generate", {"text": "a", "rid": ["a", "b"]}, "rid"),
    ("/generate", {"text": "a", "lora_path": "x"}, "lora_path"),
    ("/generate", {"text": "a", "__proto__": {}}, "__proto__"),
    # ---- /v1/chat/completions ------------------------------------------------------------------
    ("/v1/chat/completions", '{"messages": ' + deep() + "}", "body"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": BIG}, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 10**12}, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": HUGE}, "max_completion_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 10**12}, "max_completion_tokens"),
    ("/v1/chat/completions", {**CHAT, "n": 10**6}, "n"),
    ("/v1/chat/completions", {**CHAT, "seed": HUGE}, "seed"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": BIG}, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "logit_bias": {"1": HUGE}}, "logit_bias.1"),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}, "temperature"),
    ("/v1/chat/completions", {**CHAT, "messages": "hi"}, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "x" * 2_000_000}]}, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]}, "messages[0].content[0].image_url"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ("/v1/chat/completions", {**CHAT, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ("/v1/chat/completions", {**CHAT, "frobnicate": True}, "frobnicate"),
    # ---- /v1/completions ---------------------------------------------------------------------
    ("/v1/completions", {"prompt": [BIG], "max_tokens": 2}, "prompt[0]"),
    ("/v1/completions", {"prompt": [[1, 2]] * 5000, "max_tokens": 2}, "prompt"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 10**12}, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 2, "logprobs": HUGE}, "logprobs"),
    ("/v1/completions", {"prompt": "a" * 2_000_000, "max_tokens": 2}, "prompt"),
    ("/v1/completions", '{"prompt": "a", "max_tokens": NaN}', "body"),
    # ---- /v1/actions -------------------------------------------------------------------------
    ("/v1/actions", '{"instruction": "x", "image_data": ' + deep() + "}", "body"),
    ("/v1/actions", {**ACT, "num_actions": BIG}, "num_actions"),
    ("/v1/actions", {**ACT, "unnorm_key": "demo_arm", "num_actions": 10**9}, "num_actions"),
    ("/v1/actions", {**ACT, "seed": HUGE}, "seed"),
    ("/v1/actions", {**ACT, "instruction": "x" * 2_000_000}, "instruction"),
    ("/v1/actions", {**ACT, "image_data": "file:///etc/passwd"}, "image_data[0]"),
    ("/v1/actions", {**ACT, "unnorm_key": "../../etc"}, "unnorm_key"),
    ("/v1/actions", '{"instruction": "x", "image_data": "a", "temperature": -Infinity}', "body"),
    # ---- sessions and control ----------------------------------------------------------------
    ("/open_session", '{"capacity_of_str_len": ' + deep() + "}", "body"),
    ("/open_session", {"capacity_of_str_len": HUGE}, "capacity_of_str_len"),
    ("/open_session", {"priority": BIG}, "priority"),
    ("/open_session", '{"timeout": 1e999}', "body"),
    ("/open_session", {"session_id": ""}, "session_id"),
    ("/close_session", {"session_id": BIG}, "session_id"),
    ("/close_session", {}, "session_id"),
    ("/abort_request", {"rid": BIG}, "rid"),
    ("/abort_request", '{"rid": ' + deep('"a"') + "}", "body"),
    ("/pause_generation", {"mode": "explode"}, "mode"),
    ("/pause_generation", {"mode": HUGE}, "mode"),
    ("/update_weights_from_disk", {"model_path": "../../../../nonexistent"}, "model_path"),
    ("/update_weights_from_disk", {"model_path": "/tmp/\u0000"}, "model_path"),
    ("/update_weights_from_disk", {"model_path": BIG}, "model_path"),
]
# fmt: on


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with run_server(demo_model_path(), tmp_path_factory.mktemp("hostile")) as server:
        yield server


def test_there_are_more_than_sixty_distinct_cases():
    assert len({(route, str(body)) for route, body, _ in CASES}) == len(CASES) >= 60


@pytest.mark.parametrize(
    ("route", "body", "field"), CASES, ids=[f"{i}{c[0]}" for i, c in enumerate(CASES)]
)
def test_a_hostile_request_is_a_4xx_naming_the_field(node, route, body, field):
    with node.client(timeout=10) as c:  # none may take longer
        before = idle_state(c)
        if isinstance(body, str):
            r = c.post(route, content=body.encode(), headers={"content-type": "application/json"})
        else:
            r = c.post(route, json=body)
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
        err = r.json()["error"]
        named = err["param"] if route.startswith("/v1/c") else err["field"]  # OpenAI's name
        assert named == field and err["message"], err
        assert idle_state(c) == before, "the refused request left something behind"


def test_the_node_generates_after_all_of_them(node):
    with node.client() as c:
        ok = c.post("/generate", json={"text": "pick", "sampling_params": {"max_new_tokens": 3}})
        assert ok.status_code == 200 and len(ok.json()["output_ids"]) == 3
        assert c.get("/health").status_code == 200


OPENPI_FRAMES: list[tuple[bytes | str, str]] = [
    (b"\x00\x01garbage", "observation"),
    ("a text frame", "observation"),
    (msgpack.packb({"prompt": "x", "images": [[[1]] * 3]}), "observation"),
    (msgpack.packb({"prompt": BIG % 2**64}), "prompt"),
    (b"\x91" * DEEP + b"\x01", "observation"),
]


@pytest.mark.parametrize(("frame", "field"), OPENPI_FRAMES, ids=range(len(OPENPI_FRAMES)))
def test_a_hostile_openpi_frame_closes_the_connection_naming_the_field(node, frame, field):
    async def exchange() -> tuple[str, int | None]:
        url = f"ws://{node.host}:{node.port}/"
        async with websockets.connect(url, open_timeout=10, max_size=None) as ws:
            await ws.recv()  # the server's metadata
            await ws.send(frame)
            reply = await asyncio.wait_for(ws.recv(), 10)
            await asyncio.wait_for(ws.wait_closed(), 10)
            return reply, ws.close_code

    reply, code = asyncio.run(exchange())
    assert isinstance(reply, str) and reply.startswith(f"{field}:"), reply
    assert code is not None and 1000 <= code < 5000


def test_an_oversized_openpi_frame_is_refused(node, tmp_path):
    """Bigger than --max-request-bytes: the WebSocket layer closes with 1009 (message too big)."""

    async def send_big() -> int | None:
        url = f"ws://{node.host}:{node.port}/"
        async with websockets.connect(url, open_timeout=10, max_size=None) as ws:
            await ws.recv()
            await ws.send(b"\x00" * (33 * 1024 * 1024))
            await asyncio.wait_for(ws.wait_closed(), 30)
            return ws.close_code

    assert asyncio.run(send_big()) == 1009
    with node.client() as c:
        assert c.get("/health").status_code == 200


def raw_post(node: Any, head_extra: str, pieces: Iterator[bytes], path: str = "/generate") -> bytes:
    """A raw HTTP/1.1 POST: a hostile client need not send what it announces, and the server
    may answer (and close) before the client has sent everything."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head_extra}\r\n"
    with socket.create_connection((node.host, node.port), timeout=10) as s:
        with contextlib.suppress(OSError):  # the server closed its end: read what it said
            s.sendall(head.encode())
            for piece in pieces:
                s.sendall(piece)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


def status_and_error(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


class HealthProber(threading.Thread):
    """GET /health in a loop until stopped; every answer's status (or the exception's name)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.seen, self.stop = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as c:
            while not self.stop.is_set():
                try:
                    self.seen.append(c.get("/health").status_code)
                except httpx.HTTPError as e:
                    self.seen.append(type(e).__name__)


MB = 1024 * 1024


def test_a_50mb_body_is_refused_while_health_keeps_answering(node):
    main = psutil.Process(node.proc.pid)
    rss_before = main.memory_info().rss
    prober = HealthProber(node.url)
    prober.start()
    try:
        announced = raw_post(node, f"Content-Length: {50 * MB}\r\n", iter([b"x" * MB]))
        chunked = raw_post(node, "Transfer-Encoding: chunked\r\n", _chunked(50))
        with node.client(timeout=10) as c:
            big_text = c.post("/generate", json={"text": "x" * (30 * MB)})
            deep_body = c.post("/generate", content=b'{"text": ' + b"[" * DEEP * 100 + b"}")
    finally:
        prober.stop.set()
        prober.join(10)
    for reply in (announced, chunked):
        status, err = status_and_error(reply)
        assert status == 413 and err["field"] == "body", reply[:300]
    assert big_text.status_code == 400 and big_text.json()["error"]["field"] == "text"
    assert deep_body.status_code == 400 and deep_body.json()["error"]["field"] == "body"
    assert prober.seen and set(prober.seen) == {200}, prober.seen
    assert main.memory_info().rss - rss_before < 100 * MB


def _chunked(n_mb: int) -> Iterator[bytes]:
    for _ in range(n_mb):
        yield f"{MB:x}\r\n".encode() + b"x" * MB + b"\r\n"
    yield b"0\r\n\r\n"


@pytest.mark.parametrize("route", sorted({route for route, _, _ in CASES}))
def test_a_50mb_body_is_a_413_on_every_route(node, route):
    reply = raw_post(node, f"Content-Length: {50 * MB}\r\n", iter([b"{" * MB]), route)
    status, err = status_and_error(reply)
    assert status == 413 and err["field"] == "body", reply[:300]
