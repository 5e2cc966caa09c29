"""`--api-key`: the one rule for who may use a node, applied to every request the app gets.

Every HTTP route and the openpi WebSocket need the key; only the liveness probes in `OPEN_PATHS`
do not, because load balancers, sglang-router and openpi's tooling probe them without one. A
request without the key is answered 401 with the JSON error naming `authorization`; a WebSocket
handshake is refused before it is accepted, which uvicorn answers with HTTP 403. (The ASGI
denial-response extension could carry the 401 there too, but uvicorn's default WebSocket
implementation, websockets-sansio, logs a spurious ERROR for each such refusal: uvicorn PR #3138.
Anyone could then flood the log at ERROR level without a key.)

Plain ASGI rather than FastAPI's `@app.middleware("http")`: that wrapper hides the client's
disconnect from `request.is_disconnected()`, which is how a non-streaming request notices a
client that went away and aborts its generation.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from vla_server.errors import RequestError
from vla_server.frontend.common import json_response

OPEN_PATHS = frozenset({"/health", "/healthz"})
# HTTP clients (OpenAI's and SGLang's, sglang-router) send `Bearer`; openpi-client's
# `WebsocketClientPolicy(api_key=KEY)` sends `Api-Key KEY` on its handshake.
SCHEMES = {"http": ("Bearer",), "websocket": ("Bearer", "Api-Key")}


def authorized(scope: Mapping[str, Any], api_key: str) -> bool:
    """Whether an http or websocket request carries the key in a scheme its kind accepts."""
    got = dict(scope["headers"]).get(b"authorization", b"")
    return any(
        hmac.compare_digest(got, f"{scheme} {api_key}".encode())
        for scheme in SCHEMES[scope["type"]]
    )


class ApiKeyMiddleware:
    def __init__(self, app: Any, api_key: str):
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] not in SCHEMES
            or scope["path"] in OPEN_PATHS
            or authorized(scope, self.api_key)
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        err = RequestError("missing or wrong API key", "authorization", 401)
        await json_response(err.to_json(), 401)(scope, receive, send)
