"""Robot defaults of requests: an open session's (priority, unnorm key, deadline), then the
node's (`--default-num-actions`, `--default-unnorm-key`, `--default-deadline-ms`), each applied
to a request that leaves the field unset. The node's turn a plain SGLang request (what
sglang-router forwards: text with the image placeholder, `image_data`, `sampling_params`) into a
robot request; they apply only to robot requests (see `SessionRegistry.apply`)."""

from __future__ import annotations

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

    @classmethod
    def from_config(cls, config: FrontendConfig) -> NodeRobotDefaults:
        """The node's defaults; a bad flag value stops the node at start-up."""
        if config.default_num_actions is not None and config.default_num_actions < 1:
            raise ValueError("--default-num-actions must be >= 1")
        if config.default_deadline_ms is not None and not config.default_deadline_ms > 0:
            raise ValueError("--default-deadline-ms must be > 0")
        return cls(
            config.default_num_actions, config.default_unnorm_key, config.default_deadline_ms
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

    def apply(self, item: GenerateItem, robot: bool = False) -> None:
        """Fill unset fields from the session's defaults, then, for a `robot` request that
        carries images, from the node's; an unknown session is a 400.

        `robot` is the caller's: the native routes (`/generate`, `/v1/actions`, openpi) pass it,
        a chat completion or a health check does not. A request without an image is a
        language request even there (a text benchmark keeps its output lengths)."""
        self._apply_session(item)
        if robot and item.images:
            node = self.node
            if item.num_actions is None:
                item.num_actions = node.num_actions
            if item.unnorm_key is None:
                item.unnorm_key = node.unnorm_key
            if item.deadline_ms is None:
                item.deadline_ms = node.deadline_ms

    def _apply_session(self, item: GenerateItem) -> None:
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
