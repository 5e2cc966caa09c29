"""The soak benchmark's clients: robots at their control rate, and abusive ones: bad inputs,
mid-stream disconnects, explicit aborts, stalled readers and slowloris connections. Each
request's end is recorded as a `soak_stats.Outcome`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from vla_server.bench.soak_stats import CLIENT_LEFT, CUT_OFF, OK, TRANSPORT_ERROR, Outcome, classify

Finish = tuple[int | None, str | None, str | None]  # status, final finish type, transport error

# Bodies every route must refuse with a 4xx: malformed JSON, wrong and unknown fields,
# impossible sampling parameters, an undecodable image, an unknown robot, too many images.
BAD_BODIES: tuple[bytes | dict[str, Any], ...] = (
    b'{"text": ',
    b"",
    {"text": "a", "sampling_params": {"top_p": 2}},
    {"text": "a", "sampling_params": {"max_new_tokens": -3}},
    {"text": "a", "input_ids": [1]},
    {"input_ids": [1, 2, 10**9]},
    {"text": "a", "no_such_field": 1},
    {"text": "<image>", "image_data": "bm90IGFuIGltYWdl", "num_actions": 1},
    {"text": "<image>", "image_data": ["x"] * 9, "num_actions": 1},
    {"text": "pick", "num_actions": 1, "unnorm_key": "no_such_robot"},
)


@dataclass
class Recorder:
    """Collects outcomes, stamped with the run's current phase, and event counts."""

    t0: float = field(default_factory=time.perf_counter)
    phase: str = "warmup"
    outcomes: list[Outcome] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)

    def add(self, kind: str, start: float, result: str) -> None:
        now = time.perf_counter()
        self.outcomes.append(Outcome(kind, start - self.t0, now - start, result, self.phase))

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


async def stream_request(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    on_first: Callable[[dict[str, Any]], Awaitable[bool]] | None = None,
) -> Finish:
    """A streamed POST /generate; `on_first` sees the first chunk and returns True to leave
    (the finish type is then `left`)."""
    finish: str | None = None
    try:
        async with client.stream("POST", "/generate", json={**body, "stream": True}) as r:
            if r.status_code != 200:
                await r.aread()
                return r.status_code, None, None
            first = True
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if first and on_first is not None and await on_first(chunk):
                    return 200, "left", None
                first = False
                meta = chunk.get("meta_info") or {}
                finish = (meta.get("finish_reason") or {}).get("type", finish)
            return 200, finish, None
    except httpx.HTTPError as e:
        return None, None, type(e).__name__


async def until_stopped(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(seconds, 0.0))


async def robot(
    client: httpx.AsyncClient,
    rec: Recorder,
    bodies: list[dict[str, Any]],
    period: float,
    stop: asyncio.Event,
) -> None:
    """One robot's control loop until `stop`: a streamed action request per tick, cycling its
    camera frames; a tick that comes while the previous request still runs is late and is not
    made up."""
    next_tick = time.perf_counter()
    for i in itertools.count():
        if stop.is_set():
            return
        start = time.perf_counter()
        result = classify(*await stream_request(client, bodies[i % len(bodies)]))
        rec.add("robot", start, result)
        next_tick += period
        delay = next_tick - time.perf_counter()
        if delay > 0:
            await until_stopped(stop, delay)
        else:
            rec.events["late_ticks"] += 1
            next_tick = time.perf_counter()


async def bad_input(client: httpx.AsyncClient, rec: Recorder, i: int) -> None:
    bad = BAD_BODIES[i % len(BAD_BODIES)]
    start = time.perf_counter()
    try:
        if isinstance(bad, bytes):
            headers = {"content-type": "application/json"}
            r = await client.post("/generate", content=bad, headers=headers)
        else:
            r = await client.post("/generate", json=bad)
        finish = (r.json().get("meta_info") or {}).get("finish_reason") if r.is_success else None
        rec.add("bad_input", start, classify(r.status_code, (finish or {}).get("type")))
    except httpx.HTTPError as e:
        rec.add("bad_input", start, classify(None, None, type(e).__name__))


def _long_stream(tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "text": "pick up the red block and put it in the drawer",
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True, "temperature": 0},
        **extra,
    }


async def disconnect(client: httpx.AsyncClient, rec: Recorder, i: int) -> None:
    """A stream its client leaves after the first chunk."""

    async def leave(_: dict[str, Any]) -> bool:
        return True

    start = time.perf_counter()
    status, finish, error = await stream_request(client, _long_stream(128), leave)
    left = finish == "left"
    rec.add("disconnect", start, CLIENT_LEFT if left else classify(status, finish, error))


async def abort(client: httpx.AsyncClient, rec: Recorder, i: int) -> None:
    """A stream aborted by POST /abort_request after its first chunk; it must still end with
    a final chunk (finish type abort)."""
    rid = f"soak-abort-{i}"

    async def abort_it(_: dict[str, Any]) -> bool:
        await client.post("/abort_request", json={"rid": rid})
        return False

    start = time.perf_counter()
    rec.add(
        "abort",
        start,
        classify(*await stream_request(client, _long_stream(256, rid=rid), abort_it)),
    )


async def stalled_reader(host: str, port: int, rec: Recorder, hold_s: float) -> None:
    """A long stream whose client reads nothing for `hold_s`, then drains what is left: the
    node must have cut it off (a reset) by then. Logprobs make its chunks large."""
    body = _long_stream(1500, return_logprob=True, top_logprobs_num=5, stream=True)
    data = json.dumps(body).encode()
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    start = time.perf_counter()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        reader, writer = await asyncio.open_connection(sock=sock)
    except OSError:
        sock.close()
        rec.add("stalled_reader", start, TRANSPORT_ERROR)
        return
    try:
        writer.write(head + data)
        await asyncio.sleep(hold_s)
        while await reader.read(1 << 20):
            pass
        rec.add("stalled_reader", start, OK)  # it was answered in full: never stalled
    except ConnectionResetError:
        rec.add("stalled_reader", start, CUT_OFF)
    except OSError:
        rec.add("stalled_reader", start, TRANSPORT_ERROR)
    finally:
        writer.close()


@dataclass
class SlowlorisResult:
    opened: int = 0
    closed_by_server: int = 0
    answered: int = 0  # the server answered a partial request: it must not


PARTIAL_HEAD = b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool | None:
    """True: the server closed the connection; None: it answered; False: neither in time."""
    try:
        data = await asyncio.wait_for(reader.read(1024), seconds)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True if data == b"" else None


async def _slow_connection(
    host: str, port: int, stop: asyncio.Event, trickle_s: float, wait_close_s: float
) -> str:
    """A partial request head with a byte trickled every `trickle_s` until the server closes
    the connection ('closed'), answers it ('answered') or `stop`: then, without trickling,
    the server gets `wait_close_s` more to close it, else the client leaves ('left')."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(PARTIAL_HEAD)
        while not stop.is_set():
            closed = await _closed_within(reader, trickle_s)
            if closed is not False:
                return "closed" if closed else "answered"
            writer.write(b"a")
        closed = await _closed_within(reader, wait_close_s)
        return "left" if closed is False else "closed" if closed else "answered"
    finally:
        writer.close()


async def slowloris(
    host: str,
    port: int,
    connections: int,
    stop: asyncio.Event,
    trickle_s: float = 0.5,
    wait_close_s: float = 0.0,
) -> SlowlorisResult:
    """`connections` slowloris slots until `stop`, each reopened whenever the server closes
    it; see `_slow_connection`."""
    result = SlowlorisResult()

    async def slot() -> None:
        while True:
            result.opened += 1
            end = await _slow_connection(host, port, stop, trickle_s, wait_close_s)
            result.closed_by_server += end == "closed"
            result.answered += end == "answered"
            if stop.is_set():
                return

    await asyncio.gather(*(slot() for _ in range(connections)))
    return result
