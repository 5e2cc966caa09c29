"""Errors that reach a client as a 4xx/5xx JSON body naming the offending field."""

from __future__ import annotations

import re
from typing import Any

import msgspec


class RequestError(ValueError):
    def __init__(self, message: str, field: str | None = None, status_code: int = 400):
        super().__init__(message)
        self.message = message
        self.field = field
        self.status_code = status_code

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message, "type": _error_type(self.status_code)}
        if self.field is not None:
            body["field"] = self.field
        return {"error": body}


def _error_type(status: int) -> str:
    return {
        400: "invalid_request",
        401: "unauthorized",
        404: "not_found",
        409: "conflict",
        413: "too_large",
        429: "too_many_requests",
        503: "unavailable",
    }.get(status, "server_error" if status >= 500 else "invalid_request")


_PATH = re.compile(r" - at `\$\.?(.*)`$")


def from_msgspec(err: Exception, prefix: str = "") -> RequestError:
    """Turn a msgspec decode/validation error into a RequestError with a dotted field path."""
    text = str(err)
    if not isinstance(err, msgspec.ValidationError):
        return RequestError(f"malformed JSON body: {text}", field="body")
    field = None
    m = _PATH.search(text)
    if m:
        # An untyped decode only knows "somewhere in an array" (`$[...]`): that is the body.
        field = "body" if "..." in m.group(1) else m.group(1) or None
        text = text[: m.start()]
    named = re.search(r"(?:unknown|missing required) field `([^`]+)`", text)
    if named:
        field = ".".join(p for p in (field, named.group(1)) if p)
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    return RequestError(text, field=field)
