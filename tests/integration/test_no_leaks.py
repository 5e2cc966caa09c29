"""After 1,000 requests rejected before dispatch and 200 streams whose clients disconnect
mid-way, no request state and no KV is left behind."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx

from tests.integration.conftest import idle_state

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


async def _disconnecting_streams(client: httpx.AsyncClient, n: int) -> int:
    sem = asyncio.Semaphore(16)
    body = {
        "text": "pick up the cube",
        "stream": True,
        "sampling_params": {"max_new_tokens": 300, "ignore_eos": True},
    }

    async def one() -> bool:
        async with sem, client.stream("POST", "/generate", json=body) as r:
            assert r.status_code == 200
            seen = 0
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    seen += 1
                    if seen == 3:
                        return True  # leaving the block closes the connection mid-stream
            return False

    done = await asyncio.gather(*(one() for _ in range(n)))
    assert all(done), "every stream should still have been running when we left"
    return len(done)


def test_rejections_and_disconnects_leave_nothing_behind(server):
    async def run() -> tuple[int, int]:
        async with server.async_client() as client:
            return await _rejections(client, 1000), await _disconnecting_streams(client, 200)

    with server.client() as c:
        before = idle_state(c)
    rejected, disconnected = asyncio.run(run())
    assert (rejected, disconnected) == (1000, 200)
    deadline = time.monotonic() + 60
    with server.client() as c:
        while idle_state(c) != before:
            assert time.monotonic() < deadline, f"still {idle_state(c)} (idle was {before})"
            time.sleep(0.2)
        assert before == {"pending": 0, "kv_used": 0}
        metrics = c.get("/metrics").text
        finishes = {
            ln.split('"')[1]: float(ln.split()[-1])
            for ln in metrics.splitlines()
            if ln.startswith("vla_requests_total{")
        }
        # every disconnect reached the scheduler as an abort
        assert finishes.get("abort", 0) >= 200, finishes
        assert (
            c.post(
                "/generate", json={"text": "pick", "sampling_params": {"max_new_tokens": 4}}
            ).status_code
            == 200
        )


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
            while _running(c) == 0:
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


def _running(c: httpx.Client) -> int:
    return c.get("/get_server_info").json()["internal_states"][0]["num_running_reqs"]


def _finished(c: httpx.Client, kind: str) -> float:
    text = c.get("/metrics").text
    prefix = f'vla_requests_total{{finish="{kind}"'
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix))
