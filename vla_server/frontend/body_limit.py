"""The request-body bound (`--max-request-bytes`): a larger body is a 413 naming `body`.

Checked before any route reads the body: by its Content-Length before a byte is read, or, for a
chunked body, as soon as the bytes read pass the bound. So a hostile 50 MB body costs the main
process nothing, or at most the bound.
"""

from __future__ import annotations

from typing import Any

from vla_server.errors import RequestError
from vla_server.frontend.common import json_response


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, size: str) -> RequestError:
        return RequestError(
            f"the body has {size} bytes; the limit is {self.max_bytes} (--max-request-bytes)",
            "body",
            413,
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1")
        if length.isdigit() and int(length) > self.max_bytes:
            err = self._too_large(length)
            await json_response(err.to_json(), err.status_code)(scope, receive, send)
            return
        seen = 0

        async def bounded_receive() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise self._too_large(f"more than {self.max_bytes}")
            return message

        await self.app(scope, bounded_receive, send)
