"""Async keep-alive HTTP client for vla-server's streaming `/generate` (ROS-free).

One `httpx.AsyncClient` per bridge keeps its connections open between frames, so a request
costs no TCP handshake. Failures are split by what the caller should do about them:
`ServerUnavailable` (connect/read errors, 5xx, a stream cut short: back off and reconnect) and
`RequestRejected` (4xx: the request itself is wrong, retrying it unchanged cannot help).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from ros_bridge.sse import DONE, SseParser, StreamChunk


class ServerUnavailable(Exception):
    """The server could not be reached, failed (5xx) or cut the stream short."""


class RequestRejected(Exception):
    """A 4xx answer; `field` names the offending request field when the server says so."""

    def __init__(self, status: int, message: str, field: str | None) -> None:
        super().__init__(f"HTTP {status}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.message = message
        self.field = field


@dataclass
class Backoff:
    """Exponential reconnect delays: initial, initial*factor, ... capped at max_s."""

    initial_s: float = 0.1
    factor: float = 2.0
    max_s: float = 2.0
    attempts: int = 0

    def next_delay(self) -> float:
        delay = min(self.initial_s * self.factor**self.attempts, self.max_s)
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0


class VlaStreamClient:
    """Talks to one server; `malformed_lines` counts SSE lines skipped across all streams."""

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 2.0)),
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=4, keepalive_expiry=60.0),
        )
        self.malformed_lines = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def server_info(self) -> dict[str, Any]:
        return await self._get_json("/get_server_info")

    async def open_session(self, session_id: str) -> None:
        """Open the episode's session on the server; one that is already open is kept."""
        try:
            response = await self._http.post("/open_session", json={"session_id": session_id})
        except httpx.HTTPError as exc:
            raise ServerUnavailable(_describe(exc)) from None
        if response.status_code == 400 and "already open" in response.text:
            return
        await _raise_for_status(response)

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[StreamChunk]:
        """Yields chunks until `[DONE]`; raises ServerUnavailable if the stream breaks off."""
        parser = SseParser()
        done = False
        try:
            async with self._http.stream("POST", "/generate", json=body) as response:
                await _raise_for_status(response)
                async for line in response.aiter_lines():
                    if done:
                        continue  # drain: an unread response cannot return to the pool
                    for item in parser.feed(line):
                        if item == DONE:
                            done = True
                            break
                        yield item  # type: ignore[misc]
                for item in [] if done else parser.finish():
                    if item == DONE:
                        done = True
                    else:
                        yield item  # type: ignore[misc]
        except httpx.HTTPError as exc:
            raise ServerUnavailable(_describe(exc)) from None
        finally:
            self.malformed_lines += parser.malformed
        if not done:
            raise ServerUnavailable("stream ended without [DONE]")

    async def _get_json(self, path: str) -> dict[str, Any]:
        try:
            response = await self._http.get(path)
            await _raise_for_status(response)
            return response.json()
        except httpx.HTTPError as exc:
            raise ServerUnavailable(_describe(exc)) from None
        except ValueError as exc:
            raise ServerUnavailable(f"{path}: not JSON ({exc})") from None


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    await response.aread()
    message, field = _error_of(response)
    if response.status_code >= 500:
        raise ServerUnavailable(f"HTTP {response.status_code}: {message}")
    raise RequestRejected(response.status_code, message, field)


def _error_of(response: httpx.Response) -> tuple[str, str | None]:
    try:
        error = response.json().get("error", {})
        return str(error.get("message", response.text)), error.get("field")
    except (ValueError, AttributeError):
        return response.text[:200] or response.reason_phrase, None


def _describe(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
