"""VlaStreamClient over a mocked transport: chunks, error classes, malformed lines, backoff."""

from __future__ import annotations

import httpx
import pytest

from ros_bridge.stream_client import Backoff, RequestRejected, ServerUnavailable, VlaStreamClient
from tests.support.bridge_fakes import FakeServer


async def collect(client: VlaStreamClient, body: dict) -> list:
    return [chunk async for chunk in client.stream(body)]


BODY = {
    "text": "go",
    "stream": True,
    "image_data": ["x"],
    "num_actions": 2,
    "sampling_params": {"temperature": 0.0},
}


async def test_streams_chunks_with_actions_until_done() -> None:
    server = FakeServer(action_dim=3, token_delay_s=0.0)
    client = VlaStreamClient("http://vla", transport=server.transport())
    try:
        chunks = await collect(client, BODY)
    finally:
        await client.aclose()
    assert sum(c.n_tokens for c in chunks) == 6
    assert [a for c in chunks for a in c.actions] == [(0.0,) * 3, (1.0,) * 3]
    assert chunks[-1].finish_reason == {"type": "length"}
    assert server.bodies == [BODY]


async def test_malformed_lines_are_counted_across_streams() -> None:
    server = FakeServer(token_delay_s=0.0, extra_lines=["data: {oops", "bogus line"])
    client = VlaStreamClient("http://vla", transport=server.transport())
    try:
        await collect(client, BODY)
        chunks = await collect(client, BODY)
    finally:
        await client.aclose()
    assert client.malformed_lines == 4
    assert sum(len(c.actions) for c in chunks) == 2


async def test_unknown_field_is_a_rejection_naming_it() -> None:
    client = VlaStreamClient("http://vla", transport=FakeServer().transport())
    with pytest.raises(RequestRejected) as err:
        await collect(client, {**BODY, "supersede": True})
    await client.aclose()
    assert err.value.status == 400 and err.value.field == "supersede"


async def test_connection_refused_and_5xx_are_unavailable() -> None:
    client = VlaStreamClient("http://vla", transport=FakeServer(up=False).transport())
    with pytest.raises(ServerUnavailable, match="ConnectError"):
        await collect(client, BODY)
    assert not await client.health()
    with pytest.raises(ServerUnavailable):
        await client.server_info()
    await client.aclose()

    def five_hundred(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"message": "node down"}})

    client = VlaStreamClient("http://vla", transport=httpx.MockTransport(five_hundred))
    with pytest.raises(ServerUnavailable, match="503: node down"):
        await collect(client, BODY)
    await client.aclose()


async def test_stream_cut_short_is_unavailable() -> None:
    def cut(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'data: {"output_ids": [1]}\n\n')

    client = VlaStreamClient("http://vla", transport=httpx.MockTransport(cut))
    with pytest.raises(ServerUnavailable, match="without \\[DONE\\]"):
        await collect(client, BODY)
    await client.aclose()


async def test_api_key_is_sent_as_bearer() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(200, json={"status": "ok"})

    client = VlaStreamClient("http://vla/", "s3cret", transport=httpx.MockTransport(handler))
    assert await client.health()
    await client.aclose()
    assert seen == ["Bearer s3cret"]


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(initial_s=0.1, factor=2.0, max_s=0.5)
    delays = [backoff.next_delay() for _ in range(5)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)
