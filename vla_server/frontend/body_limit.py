"""The request-body bound (`--max-request-bytes`): a larger body is a 413 naming `body`.

Checked before any route reads the body: by its Content-Length before a byte is read, or, for a
chunked body, as soon as the bytes read pass the bound. So a hostile 50 MB body costs the main
process nothing, or at most the bound. The answer closes the connection: the rest of the body is
never read, so the connection cannot carry another request.
"""

from __future__ import annotations

from typing import Any

from vla_server.errors import RequestError
from vla_server.frontend.common import json_response


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, size: str, scope: Any, receive: Any, send: Any) -> None:
        err = RequestError(
            f"the body has {size} bytes; the limit is {self.max_bytes} (--max-request-bytes)",
            "body",
            413,
        )
        response = json_response(err.to_json(), err.status_code)
        response.headers["connection"] = "close"
        await response(scope, receive, send)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1")
        if length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(length, scope, receive, send)
            return
        seen = 0

        async def bounded_receive() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _TooLarge
            return message

        try:
            await self.app(scope, bounded_receive, send)
        except _TooLarge:  # raised while a route read the body: nothing was answered yet
            await self._refuse(f"more than {self.max_bytes}", scope, receive, send)
