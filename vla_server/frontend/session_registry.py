"""Robot defaults of requests: an open session's (priority, unnorm key, deadline), then the
node's (`--default-num-actions`, `--default-unnorm-key`, `--default-deadline-ms`), each applied
to a request that leaves the field unset. The node's turn a plain SGLang request (what
sglang-router forwards: text with the image placeholder, `image_data`, `sampling_params`) into a
robot request; they apply only to robot requests (see `SessionRegistry.apply`)."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from vla_server.config import FrontendConfig
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


@dataclass(frozen=True)
class NodeRobotDefaults:
    num_actions: int | None = None
    unnorm_key: str | None = None
    deadline_ms: float | None = None
    priority: int = 0  # of every request that gives none (--default-priority-value)

    @classmethod
    def from_config(cls, config: FrontendConfig) -> NodeRobotDefaults:
        """The node's defaults; a bad flag value stops the node at start-up."""
        if config.default_num_actions is not None and config.default_num_actions < 1:
            raise ValueError("--default-num-actions must be >= 1")
        if config.default_deadline_ms is not None and not config.default_deadline_ms > 0:
            raise ValueError("--default-deadline-ms must be > 0")
        return cls(
            config.default_num_actions,
            config.default_unnorm_key,
            config.default_deadline_ms,
            config.default_priority_value,
        )


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
    def __init__(self, node: NodeRobotDefaults | None = None) -> None:
        self.sessions: dict[str, SessionDefaults] = {}
        self.node = node or NodeRobotDefaults()

    def add(self, body: OpenSessionBody) -> None:
        assert body.session_id is not None
        self.sessions[body.session_id] = SessionDefaults(
            body.priority, body.unnorm_key, body.deadline_ms
        )

    def remove(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def apply(self, item: GenerateItem, robot: bool = False) -> GenerateItem:
        """`item` with its unset fields from the session's defaults, then, for a `robot`
        request that carries images, from the node's, and the node's default priority: the one
        place a request's defaults are resolved. An unknown session is a 400.

        `robot` is the caller's: the native routes (`/generate`, `/v1/actions`, openpi) pass it,
        a chat completion or a health check does not. A request without an image is a
        language request even there (a text benchmark keeps its output lengths)."""
        given = [self._session_defaults(item)]
        if robot and item.images:
            given.append(self.node)
        given.append(NodeRobotDefaults(priority=self.node.priority))
        unset = {}
        for defaults in given:
            for name in ("priority", "num_actions", "unnorm_key", "deadline_ms"):
                value = getattr(defaults, name, None)
                if getattr(item, name) is None and name not in unset and value is not None:
                    unset[name] = value
        return dataclasses.replace(item, **unset) if unset else item

    def _session_defaults(self, item: GenerateItem) -> SessionDefaults | None:
        sid = item.session_params.id if item.session_params else item.session_id
        if sid is None:
            return None
        defaults = self.sessions.get(sid)
        if defaults is None and item.session_params is not None:
            raise RequestError(f"unknown or closed session {sid!r}", "session_params.id")
        return defaults
