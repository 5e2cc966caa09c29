"""Counting answered HTTP requests by route and status (`vla_http_requests_total`).

It is how an operator sees which routes a router, a benchmark or a robot calls, and how often
they fail: sglang-router's worker probes (`/server_info`, `/model_info`, `/get_load`,
`/health`) show up here. Plain ASGI, like the API-key check, so a client's disconnect still
reaches the routes.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter


class RequestCounter:
    def __init__(self, app: Any, counter: Counter):
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0  # 0: the app ended without answering

        async def send_and_note(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            # The router put the matched route in the scope: label by its template, so the
            # label set stays bounded whatever paths clients try.
            route = getattr(scope.get("route"), "path", "unmatched")
            self.counter.labels(route, str(status)).inc()
