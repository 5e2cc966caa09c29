"""The `--api-key` rule at the ASGI level: which schemes each kind of request may use, and how a
WebSocket handshake is refused. The live walk of every route is in
tests/integration/test_auth_and_cli.py."""

from __future__ import annotations

from typing import Any

import pytest

from vla_server.frontend.auth import ApiKeyMiddleware, authorized

KEY = "s3cret"


def _scope(kind: str, authorization: str | None, path: str = "/x", **extra: Any) -> dict:
    headers = [(b"authorization", authorization.encode())] if authorization else []
    return {"type": kind, "path": path, "headers": headers, **extra}


@pytest.mark.parametrize(
    ("kind", "authorization", "ok"),
    [
        ("http", f"Bearer {KEY}", True),
        ("http", f"Api-Key {KEY}", False),
        ("http", "Bearer nope", False),
        ("http", KEY, False),
        ("http", None, False),
        ("websocket", f"Api-Key {KEY}", True),  # WebsocketClientPolicy(api_key=KEY)
        ("websocket", f"Bearer {KEY}", True),
        ("websocket", "Api-Key nope", False),
        ("websocket", None, False),
    ],
)
def test_schemes(kind, authorization, ok):
    assert authorized(_scope(kind, authorization), KEY) is ok


async def _run(scope: dict) -> tuple[list[dict], bool]:
    """The messages the middleware sends for `scope`, and whether the app was reached."""
    sent: list[dict] = []
    reached = False

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal reached
        reached = True

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await ApiKeyMiddleware(app, KEY)(scope, receive, send)
    return sent, reached


async def test_a_websocket_is_refused_before_it_is_accepted():
    # Even where the server offers the denial response (auth.py says why it is not used).
    sent, reached = await _run(
        _scope("websocket", None, extensions={"websocket.http.response": {}})
    )
    assert not reached
    assert sent == [{"type": "websocket.close", "code": 1008}]


@pytest.mark.parametrize(
    "scope",
    [
        _scope("http", None, path="/health"),
        _scope("http", None, path="/healthz"),
        _scope("http", f"Bearer {KEY}"),
        _scope("websocket", f"Api-Key {KEY}", path="/"),
        {"type": "lifespan"},
    ],
)
async def test_what_passes(scope):
    sent, reached = await _run(scope)
    assert reached and sent == []
