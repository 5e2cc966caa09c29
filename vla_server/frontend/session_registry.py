"""Open sessions as the main process sees them: their robot defaults (priority, unnorm key,
deadline), applied to every request of the session that leaves the field unset."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from vla_server.errors import RequestError, from_msgspec
from vla_server.frontend.generate_request import GenerateItem


class OpenSessionBody(msgspec.Struct, forbid_unknown_fields=True):
    capacity_of_str_len: int = 0
    session_id: str | None = None
    timeout: float | None = None  # seconds of inactivity before the session is closed
    priority: int | None = None
    unnorm_key: str | None = None
    deadline_ms: float | None = None


@dataclass(frozen=True)
class SessionDefaults:
    priority: int | None
    unnorm_key: str | None
    deadline_ms: float | None


def parse_open_session(body: dict[str, Any]) -> OpenSessionBody:
    try:
        req = msgspec.convert(body, OpenSessionBody)
    except msgspec.ValidationError as e:
        raise from_msgspec(e) from None
    if req.capacity_of_str_len < 0:
        raise RequestError("must be >= 0", "capacity_of_str_len")
    if req.timeout is not None and req.timeout <= 0:
        raise RequestError("must be > 0 seconds", "timeout")
    if req.deadline_ms is not None and req.deadline_ms <= 0:
        raise RequestError("must be > 0", "deadline_ms")
    if req.session_id == "":
        raise RequestError("must be a non-empty string", "session_id")
    if req.session_id is None:
        req.session_id = uuid.uuid4().hex
    return req


class SessionRegistry:
    def __init__(self) -> None:
        self.sessions: dict[str, SessionDefaults] = {}

    def add(self, body: OpenSessionBody) -> None:
        assert body.session_id is not None
        self.sessions[body.session_id] = SessionDefaults(
            body.priority, body.unnorm_key, body.deadline_ms
        )

    def remove(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def apply(self, item: GenerateItem) -> None:
        """Fill unset fields from the session's defaults; an unknown session is a 400."""
        sid = item.session_params.id if item.session_params else item.session_id
        if sid is None:
            return
        defaults = self.sessions.get(sid)
        if defaults is None:
            if item.session_params is not None:
                raise RequestError(f"unknown or closed session {sid!r}", "session_params.id")
            return
        if item.priority is None:
            item.priority = defaults.priority
        if item.unnorm_key is None:
            item.unnorm_key = defaults.unnorm_key
        if item.deadline_ms is None:
            item.deadline_ms = defaults.deadline_ms
