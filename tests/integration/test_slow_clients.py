"""Slow and hostile clients (vla_server/entrypoints/http_guard.py): 200 slowloris connections
are closed by the server while a normal client is served; a request body that stops half-way is
closed as a 499; a stream whose client never reads is cut off, its request aborted in the
scheduler and freed. The node keeps serving, and no route fails with an ASGI error."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from typing import Any

import httpx

from tests.support.async_node import POLL_TIMEOUT_S, body, metric
from tests.support.server import idle_state, metric_sum, module_server
from tests.support.tiny_checkpoints import make_llama
from vla_server.bench.soak_traffic import SlowlorisResult, slowloris

# A context long enough that the never-read stream cannot run to its end before it is cut off.
LONG_CONTEXT = 8192
READ_TIMEOUT_S = 2
SEND_TIMEOUT_S = 1


def _long_llama() -> Any:
    return make_llama(max_position_embeddings=LONG_CONTEXT)


server = module_server(
    _long_llama,
    "--max-total-tokens",
    str(LONG_CONTEXT + 1024),
    "--request-read-timeout",
    str(READ_TIMEOUT_S),
    "--send-timeout",
    str(SEND_TIMEOUT_S),
)

SLOWLORIS = 200
HOLD_S = 10.0  # how long the attack lasts; nothing is timed against it


def _head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def _normal_client(c: httpx.AsyncClient, stop: asyncio.Event) -> list[int]:
    """Plain and streamed requests one after the other until `stop`; their statuses."""
    statuses = []
    while not stop.is_set():
        r = await c.post("/generate", json=body([5, 6, 7], 8))
        statuses.append(r.status_code)
        async with c.stream("POST", "/generate", json=body([5, 6, 7], 8, stream=True)) as s:
            lines = [line async for line in s.aiter_lines()]
            statuses.append(s.status_code if "data: [DONE]" in lines else -1)
    return statuses


def test_slowloris_connections_are_closed_while_others_are_served(server):
    """200 connections trickle a partial request head (each reopened when the node closes
    it) while a client's requests go on; once the trickling stops, the node must still close
    every one of them, and nothing else."""

    async def run() -> tuple[list[int], SlowlorisResult, float]:
        stop = asyncio.Event()
        async with server.async_client() as c:
            before = await metric(c, "vla_slow_client_aborts_total", phase="request")
            attack = asyncio.create_task(
                slowloris(server.host, server.port, SLOWLORIS, stop, wait_close_s=POLL_TIMEOUT_S)
            )
            normal = asyncio.create_task(_normal_client(c, stop))
            await asyncio.sleep(HOLD_S)
            stop.set()
            statuses, result = await normal, await attack
            closed = await metric(c, "vla_slow_client_aborts_total", phase="request") - before
        return statuses, result, closed

    statuses, result, closed = asyncio.run(run())
    assert statuses and set(statuses) == {200}, statuses
    assert result.answered == 0
    assert result.opened >= SLOWLORIS
    assert result.closed_by_server == result.opened, "a partial request was left open"
    assert closed == result.opened, "each partial request is cut once, and nothing else"
    with server.client() as c:
        assert c.post("/generate", json=body([5, 6, 7], 4)).status_code == 200
    assert "Exception in ASGI application" not in server.log()


def test_a_body_that_stops_half_way_is_closed_as_a_499(server):
    data = json.dumps(body([5, 6, 7], 4)).encode()
    with server.client() as c:
        text = c.get("/metrics").text
        before = metric_sum(text, "vla_slow_client_aborts_total", phase="request")
        gone = metric_sum(text, "vla_http_requests_total", route="/generate", status="499")
        with socket.create_connection((server.host, server.port)) as raw:
            raw.sendall(_head("/generate", len(data)) + data[:10])
            raw.settimeout(POLL_TIMEOUT_S)
            with contextlib.suppress(ConnectionResetError):  # closed with a reset
                assert raw.recv(1024) == b"", "the server answered a partial body"
        text = c.get("/metrics").text
        assert metric_sum(text, "vla_slow_client_aborts_total", phase="request") == before + 1
        assert (
            metric_sum(text, "vla_http_requests_total", route="/generate", status="499") == gone + 1
        )
    assert "Exception in ASGI application" not in server.log()


def _wait(what: str, done: Any) -> None:
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_stream_whose_client_never_reads_is_aborted_and_freed(server):
    """The client sends a long stream request and never reads: once its socket is full, the
    send stalls; after --send-timeout the connection is reset and the request aborted in the
    scheduler (it does not run to its end). Logprobs make each cumulative chunk large, so the
    socket buffers fill within the stream's first tokens."""
    stream = body(
        [5, 6, 7],
        LONG_CONTEXT - 16,
        stream=True,
        return_logprob=True,
        top_logprobs_num=5,
    )
    data = json.dumps(stream).encode()

    def count(name: str, **labels: str) -> float:
        return metric_sum(c.get("/metrics").text, name, **labels)

    with server.client() as c:
        cut = count("vla_slow_client_aborts_total", phase="response")
        aborted = count("vla_requests_total", finish="abort")
        completed = count("vla_requests_total", finish="length")
        with socket.socket() as raw:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.connect((server.host, server.port))
            raw.sendall(_head("/generate", len(data)) + data)
            _wait(
                "the stalled stream to be cut off",
                lambda: count("vla_slow_client_aborts_total", phase="response") == cut + 1,
            )
            _wait("the request to be freed", lambda: idle_state(c) == {"pending": 0, "kv_used": 0})
        assert count("vla_requests_total", finish="abort") == aborted + 1
        assert count("vla_requests_total", finish="length") == completed, "it ran to its end"
        assert c.post("/generate", json=body([5, 6, 7], 4)).status_code == 200
    assert "Exception in ASGI application" not in server.log()
