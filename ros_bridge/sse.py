"""Server-sent events from `/generate?stream`: line parsing and chunk validation (ROS-free).

The server writes `data: {json}` events separated by blank lines and ends with `data: [DONE]`.
As in SGLang, each event carries everything generated so far (`text`, `output_ids`) and the
action vectors completed since the previous event (`actions`); the parser turns that into what
is new per event. It needs the node's default stream (not `--incremental-streaming-output`).
A line that is not an SSE field (`data`, `event`, `id`, `retry`) or a comment, an event whose
payload is not a JSON object, or a chunk whose fields have the wrong types is *malformed*: it is
counted and skipped, never raised, so one bad line cannot stop a robot's action stream.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

DONE = "[DONE]"
_FIELDS = ("data", "event", "id", "retry")


@dataclass(frozen=True)
class StreamChunk:
    """One decoded stream chunk: what arrived since the previous one."""

    n_tokens: int
    text: str
    actions: tuple[tuple[float, ...], ...]
    finish_reason: dict[str, Any] | None
    meta: dict[str, Any]


@dataclass
class SseParser:
    """Feeds lines (without their line break), returns complete chunks; `DONE` ends a stream."""

    malformed: int = 0
    _data: list[str] = field(default_factory=list)
    _tokens: int = 0  # output tokens and text characters of the stream so far
    _chars: int = 0

    def feed(self, line: str) -> list[StreamChunk | str]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):  # an SSE comment (keep-alive)
            return []
        name, sep, value = line.partition(":")
        if not sep or name not in _FIELDS:
            self.malformed += 1
            return []
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return []

    def finish(self) -> list[StreamChunk | str]:
        """Dispatches an event left open when the connection ended without a blank line."""
        return self._dispatch()

    def _dispatch(self) -> list[StreamChunk | str]:
        if not self._data:
            return []
        payload, self._data = "\n".join(self._data), []
        if payload == DONE:
            return [DONE]
        try:
            obj = json.loads(payload)
        except ValueError:
            self.malformed += 1
            return []
        chunk = parse_chunk(obj)
        if chunk is None:
            self.malformed += 1
            return []
        new = replace(
            chunk, n_tokens=max(chunk.n_tokens - self._tokens, 0), text=chunk.text[self._chars :]
        )
        self._tokens, self._chars = max(chunk.n_tokens, self._tokens), len(chunk.text)
        return [new]


def parse_chunk(obj: Any) -> StreamChunk | None:
    """The chunk as sent (`n_tokens` and `text` so far), or None when a field has the wrong
    type (the whole event is then skipped)."""
    if not isinstance(obj, dict):
        return None
    ids = obj.get("output_ids", [])
    meta = obj.get("meta_info", {})
    text = obj.get("text", "")
    actions = _actions(obj.get("actions", []))
    if not (isinstance(ids, list) and isinstance(meta, dict) and isinstance(text, str)):
        return None
    finish = meta.get("finish_reason")
    if actions is None or not (finish is None or isinstance(finish, dict)):
        return None
    return StreamChunk(len(ids), text, actions, finish, meta)


def _actions(value: Any) -> tuple[tuple[float, ...], ...] | None:
    if not isinstance(value, list):
        return None
    out = []
    for vector in value:
        if not isinstance(vector, list) or not vector:
            return None
        if not all(_is_number(x) for x in vector):
            return None
        out.append(tuple(float(x) for x in vector))
    return tuple(out)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
