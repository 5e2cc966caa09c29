"""A scripted stand-in for vla-server's HTTP API (httpx.MockTransport), for worker unit tests.

It speaks the documented request/stream API (notes: `/generate` SSE chunks with `actions`,
`/get_server_info` -> mm.preprocess_digest, 400 naming an unknown field) and records every
request body, so tests check what the bridge sent and what it did with the answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

DIGEST_HEX = "00112233445566778899aabbccddeeff"


@dataclass
class FakeServer:
    action_dim: int = 3
    token_delay_s: float = 0.005
    first_token_delay_s: float = 0.0
    up: bool = True
    multimodal: bool = True
    known_fields: set[str] = field(
        default_factory=lambda: {
            "text",
            "stream",
            "rid",
            "image_data",
            "mm_hashes",
            "unnorm_key",
            "num_actions",
            "sampling_params",
        }
    )
    extra_lines: list[str] = field(default_factory=list)  # sent before the first chunk
    bodies: list[dict[str, Any]] = field(default_factory=list)
    finish: dict[str, Any] | None = None  # overrides the last chunk's finish_reason
    generate_error: int | None = None  # /generate answers this 5xx while /health stays 200
    has_sessions: bool = True  # False: an older server, /open_session is a 404
    sessions: list[str] = field(default_factory=list)  # ids opened with /open_session
    posts: list[tuple[str, str | None]] = field(default_factory=list)  # (path, session_id)
    final_chunk_at: list[float] = field(default_factory=list)  # monotonic, per stream
    # The server ends each stream after this many actions with `finish` (a partial chunk)
    max_actions: int | None = None
    state_dim: int = 0  # > 0: the policy reads the robot state (mm.robot in /get_server_info)

    @property
    def accepted(self) -> list[dict[str, Any]]:
        """The request bodies answered with a stream (not rejected for an unknown field)."""
        return [b for b in self.bodies if set(b) <= self.known_fields]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if request.url.path == "/get_server_info":
            info: dict[str, Any] = {"port": 1}
            if self.multimodal:
                info["mm"] = {"preprocess_digest": DIGEST_HEX}
                if self.state_dim:
                    info["mm"]["robot"] = {"state_dim": self.state_dim}
            return httpx.Response(200, json=info)
        body = json.loads(request.content)
        self.posts.append((request.url.path, body.get("session_id")))
        if request.url.path == "/open_session":
            if not self.has_sessions:
                return httpx.Response(404, json={"detail": "Not Found"})
            self.sessions.append(body["session_id"])
            return httpx.Response(200, json=body["session_id"])
        self.bodies.append(body)
        if self.generate_error is not None:
            error = {"message": "scheduler died", "type": "internal_error"}
            return httpx.Response(self.generate_error, json={"error": error})
        unknown = sorted(set(body) - self.known_fields)
        if unknown:
            error = {"message": f"unknown field `{unknown[0]}`", "field": unknown[0]}
            return httpx.Response(400, json={"error": error})
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self._events(body)
        )

    async def _events(self, body: dict[str, Any]) -> AsyncIterator[bytes]:
        for line in self.extra_lines:
            yield (line + "\n\n").encode()
        n_actions = body.get("num_actions", 0) if "image_data" in body else 0
        if self.max_actions is not None:
            n_actions = min(n_actions, self.max_actions)
        await asyncio.sleep(self.first_token_delay_s)
        if self.max_actions == 0:  # ended before its first action
            end = {"text": "", "output_ids": [], "actions": [], "meta_info": {
                "finish_reason": self.finish or {"type": "length"}}}  # fmt: skip
            yield f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode()
            return
        n_tokens = n_actions * self.action_dim or body["sampling_params"]["max_new_tokens"]
        for i in range(n_tokens):
            if not self.up:
                return  # the connection drops mid-stream
            await asyncio.sleep(self.token_delay_s)
            done = (i + 1) % self.action_dim == 0 and n_actions
            action = [float(i // self.action_dim)] * self.action_dim if done else None
            last = i == n_tokens - 1
            finish = (self.finish or {"type": "length"}) if last else None
            if last:
                self.final_chunk_at.append(time.monotonic())
            chunk = {  # as the node streams: text and ids so far, actions new
                "text": "t" * (i + 1),
                "output_ids": list(range(i + 1)),
                "actions": [action] if action else [],
                "meta_info": {"finish_reason": finish},
            }
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"


@dataclass
class RecordingSink:
    actions: list[tuple[tuple[int, int], int, tuple[float, ...]]] = field(default_factory=list)
    late: list[Any] = field(default_factory=list)
    reports: list[tuple[str, str]] = field(default_factory=list)
    reject_width: int | None = None
    published_at: list[float] = field(default_factory=list)  # monotonic, per action
    guidance: Any = None  # what rtc_guidance answers
    guidance_asked: list[tuple[tuple[int, int], int]] = field(default_factory=list)
    periods: list[float] = field(default_factory=list)  # set_action_period calls

    def publish_action(self, stamp: tuple[int, int], index: int, action: Any) -> None:
        if self.reject_width is not None and len(action) != self.reject_width:
            raise ValueError("wrong width")
        self.actions.append((stamp, index, tuple(action)))
        self.published_at.append(time.monotonic())

    def publish_late(self, command: Any) -> None:
        self.late.append(command)

    def report(self, level: str, message: str) -> None:
        self.reports.append((level, message))

    def set_action_period(self, period_s: float) -> None:
        self.periods.append(period_s)

    def rtc_guidance(self, stamp: tuple[int, int], horizon: int) -> Any:
        self.guidance_asked.append((stamp, horizon))
        return self.guidance
