"""After 10,000 requests rejected before dispatch, 1,000 streams whose clients disconnect
mid-way and 200 aborted by POST /abort_request, no request state, no KV and no memory is left
behind, and each stream that was running ended as exactly one abort in the scheduler."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import psutil
import pytest

from tests.support.async_node import (
    internal,
    pause,
    resume,
    wait_pending,
    wait_until,
)
from tests.support.server import idle_state, metric_sum, running_reqs

BAD_BODIES = [
    {"text": "a", "sampling_params": {"top_p": 2}},
    {"input_ids": [1, 2, 10**9]},
    {"text": "pick up the cube " * 200},
    {"text": "a", "input_ids": [1]},
    {"text": "a", "sampling_params": {"max_new_tokens": -3}},
]


async def _rejections(client: httpx.AsyncClient, n: int) -> int:
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> int:
        async with sem:
            if i % 6 == 5:
                r = await client.post(
                    "/generate", content=b'{"text": ', headers={"content-type": "application/json"}
                )
            else:
                r = await client.post("/generate", json=BAD_BODIES[i % 6 % len(BAD_BODIES)])
            return r.status_code

    codes = await asyncio.gather(*(one(i) for i in range(n)))
    assert all(400 <= c < 500 for c in codes)
    return len(codes)


STREAM_BODY = {
    "text": "pick up the cube",
    "stream": True,
    "sampling_params": {"max_new_tokens": 200, "ignore_eos": True},
}
# Streams per round, as many as the node runs at once; 16 x (5 + 200) tokens fit the 4096-token
# KV pool, so a round's streams are all admitted together (one the pool cannot reserve for yet
# would wait until others had finished).
GROUP = 16


async def _stream(
    client: httpx.AsyncClient, rid: str, started: asyncio.Queue[None], leave: asyncio.Event
) -> None:
    """A stream held open after its first chunk until `leave`; then its client either leaves
    (the connection closes mid-stream) or, if the stream was aborted, reads it to its end."""
    async with client.stream("POST", "/generate", json={**STREAM_BODY, "rid": rid}) as r:
        assert r.status_code == 200
        # Held until `leave`: an abandoned line iterator would be finalised at once, and that
        # closes the connection before the test means to.
        lines = r.aiter_lines()
        async for line in lines:
            if line.startswith("data: {"):
                assert json.loads(line[6:])["meta_info"]["finish_reason"] is None
                break
        started.put_nowait(None)
        await leave.wait()
        if rid.startswith("abort-"):
            async for _ in lines:  # the explicit abort ends the stream
                pass
    # leaving the block closed the connection (mid-stream, unless it was aborted)


async def _paused_round(client: httpx.AsyncClient, k: int, end: str, round_no: int) -> int:
    """`k` streams ended while generation is paused, by their clients leaving (`end` is
    "disconnect") or by POST /abort_request ("abort"); returns how many were still running
    then (each of those must end as exactly one abort).

    The scheduler can outrun a front end that streams to many clients, so a disconnect could
    arrive after a stream's last token and abort nothing. Generation is therefore paused in
    place once all `k` run (each has sent its first chunk) before they are ended; the aborts
    then end them in the paused scheduler. On a starved machine some may still finish between
    seeing them run and the pause: those are counted as finished, not as aborted.
    """
    started: asyncio.Queue[None] = asyncio.Queue()
    leave = asyncio.Event()
    rids = [f"{end}-{round_no}-{i}" for i in range(k)]
    await pause(client, "in_place")  # held before dispatch: released together below
    tasks = [asyncio.create_task(_stream(client, rid, started, leave)) for rid in rids]
    try:
        await wait_pending(client, k)
        await resume(client)
        # All k running, not merely none waiting: right after the resume the streams may not
        # have reached the scheduler yet (none waiting there either), and the pause below would
        # hold them back in the main process.
        await wait_until(
            client,
            lambda s: s["num_running_reqs"] == k and s["num_waiting_reqs"] == 0,
            "the streams running",
        )
        await pause(client, "in_place")
        running = (await internal(client))["num_running_reqs"]
        for _ in range(k):
            await started.get()
        if end == "abort":
            for rid in rids:
                assert (await client.post("/abort_request", json={"rid": rid})).status_code == 200
        leave.set()
        await asyncio.gather(*tasks)
        await wait_pending(client, 0)  # every abort came back from the scheduler
    finally:
        leave.set()
        await resume(client)  # never leave the shared node paused for the next test
    return running


async def _ended_streams(client: httpx.AsyncClient, n: int, end: str) -> int:
    """How many of `n` streams ended by `end` were running when they were ended."""
    running = 0
    for first in range(0, n, GROUP):
        running += await _paused_round(client, min(GROUP, n - first), end, first // GROUP)
    return running


async def _abuse(server: Any, rejects: int, disconnects: int, aborts: int) -> int:
    """The three kinds of abuse in turn; how many streams were running when ended."""
    async with server.async_client() as client:
        assert await _rejections(client, rejects) == rejects
        running = await _ended_streams(client, disconnects, "disconnect")
        return running + await _ended_streams(client, aborts, "abort")


def _rss_mb(server: Any) -> dict[int, float]:
    """RSS of the node's processes (main, scheduler, detokenizer) by pid, in MB."""
    procs = [psutil.Process(server.proc.pid), *server.node_children()]
    return {p.pid: p.memory_info().rss / 2**20 for p in procs}


def test_rejections_disconnects_and_aborts_leave_nothing_behind(server):
    """10,000 requests rejected before dispatch, 1,000 streams whose clients leave mid-way and
    200 running streams aborted by POST /abort_request: nothing is left behind (no request
    state, no KV, no memory growth beyond 50 MB per process), each running stream ended as
    exactly one abort, and the node keeps serving."""
    asyncio.run(_abuse(server, 200, GROUP, GROUP))  # warm-up: one-time allocations
    with server.client() as c:
        before = idle_state(c)
        aborted_before, completed_before = _finished(c, "abort"), _finished(c, "length")
    rss_before = _rss_mb(server)
    running = asyncio.run(_abuse(server, 10_000, 1000, 200))
    assert running > 0, "no stream was still running when it was ended"
    deadline = time.monotonic() + 60
    with server.client() as c:
        while idle_state(c) != before:
            assert time.monotonic() < deadline, f"still {idle_state(c)} (idle was {before})"
            time.sleep(0.2)
        assert before == {"pending": 0, "kv_used": 0}
        # Every ended running stream reached the scheduler as an abort and ended there as one
        # (a finish is counted once per request, when its end comes back); the streams that
        # finished first count as finished; the rejections, refused before dispatch, add none.
        assert _finished(c, "abort") - aborted_before == running
        finished = _finished(c, "length") - completed_before
        assert finished == 1200 - running, "an ended stream ran to its end"
        ok = c.post("/generate", json={"text": "pick", "sampling_params": {"max_new_tokens": 4}})
        assert ok.status_code == 200
    grown = {pid: _rss_mb(server)[pid] - mb for pid, mb in rss_before.items()}
    print(f"RSS growth by process (MB): {grown}; {running} of 1200 streams ended running")
    assert all(mb < 50 for mb in grown.values()), grown


def test_non_stream_client_disconnect_aborts_in_the_scheduler(server):
    """The client's connection closes while its non-streaming request runs: the request must
    end as an abort in the scheduler, not run to its end. A raw socket lets the test close the
    connection at a moment it has seen the request running, whatever the machine's speed."""
    body = json.dumps(
        {"text": "pick", "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
    ).encode()
    head = (
        f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with server.client() as c:
        aborted_before = _finished(c, "abort")
        completed_before = _finished(c, "length")
        with socket.create_connection((server.host, server.port)) as raw:
            raw.sendall(head + body)
            deadline = time.monotonic() + 30
            while running_reqs(c) == 0:
                assert time.monotonic() < deadline, "the request never started"
                time.sleep(0.005)
        deadline = time.monotonic() + 30
        while idle_state(c)["pending"]:
            assert time.monotonic() < deadline, "the request is still pending"
            time.sleep(0.05)
        assert _finished(c, "abort") == aborted_before + 1, "it ended without an abort"
        assert _finished(c, "length") == completed_before, "it ran to its end"
        info = c.get("/get_server_info").json()
        assert info["kv_pool"]["used"] == 0
        assert info["internal_states"][0]["num_running_reqs"] == 0


def _finished(c: httpx.Client, kind: str) -> float:
    text = c.get("/metrics").text
    prefix = f'vla_requests_total{{finish="{kind}"'
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix))


@pytest.mark.parametrize(
    "path,body",
    [
        (
            "/generate",
            {
                "text": "pick",
                "stream": True,
                "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
            },
        ),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "pick"}],
                "stream": True,
                "max_tokens": 400,
                "ignore_eos": True,
            },
        ),
    ],
)
def test_a_stream_whose_client_left_before_its_first_chunk_is_a_499(server, path, body):
    """Benchmarks (guidellm, genai-bench) cancel streams that have not answered yet. Such a
    request is held back by a pause here until its client has gone; then it is let through: it
    must end once in the scheduler (as an abort, unless it finished before the front end saw
    its client gone) and as a 499 at the route, not as an ASGI error."""
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()

    async def run() -> None:
        async with server.async_client() as c:
            await pause(c, "in_place")
            with socket.create_connection((server.host, server.port)) as raw:
                raw.sendall(head + data)
                await wait_pending(c, 1)
            await resume(c)
            await wait_pending(c, 0)

    with server.client() as c:
        before = metric_sum(c.get("/metrics").text, "vla_http_requests_total", route=path)
        gone_before = _http_count(c, path, "499")
        ended_before = _finished(c, "abort") + _finished(c, "length")
        asyncio.run(run())
        assert _http_count(c, path, "499") == gone_before + 1
        assert metric_sum(c.get("/metrics").text, "vla_http_requests_total", route=path) == (
            before + 1
        ), "the request was counted under another status"
        assert _finished(c, "abort") + _finished(c, "length") == ended_before + 1
        assert "Exception in ASGI application" not in server.log()


def _http_count(c: httpx.Client, route: str, status: str) -> float:
    text = c.get("/metrics").text
    return metric_sum(text, "vla_http_requests_total", route=route, status=status)
