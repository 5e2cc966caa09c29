"""Server-sent-event replies: `data: <json>` events ending with `data: [DONE]`."""

from __future__ import annotations

import json
from typing import Any

import httpx

from vla_harness.server_subprocess import ServerProcess


def sse_events(text: str) -> list[dict[str, Any]]:
    """The JSON events of a whole SSE body; every event must be `data: <json>` and the last
    `data: [DONE]`."""
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]", events[-1]
    for e in events[:-1]:
        assert e.startswith("data: "), e
    return [json.loads(e[len("data: ") :]) for e in events[:-1]]


def stream_generate(server: ServerProcess, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of `body` streamed from POST /generate, read as they arrive."""
    chunks = []
    with (
        httpx.Client(base_url=server.url, timeout=120) as client,
        client.stream("POST", "/generate", json={**body, "stream": True}) as r,
    ):
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[len("data: ") :]))
    return chunks
