"""Pieces the HTTP front ends (native, OpenAI, actions, openpi) share over the TokenizerManager."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from vla_server.config import FrontendConfig
from vla_server.errors import RequestError, from_msgspec
from vla_server.frontend.field_tables import FieldTable
from vla_server.frontend.json_body import decode_json
from vla_server.frontend.tokenizer_manager import ClientDisconnected, TokenizerManager

T = TypeVar("T")


async def request_body(request: Request, typ: type[T], table: FieldTable | None = None) -> T:
    """The JSON request body as `typ`; a malformed body or a bad field is a RequestError.
    With a `table`, the body's fields are checked against it first and only its implemented
    fields reach `typ`."""
    raw = decode_json(await request.body() or b"{}")
    try:
        return msgspec.convert(raw if table is None else table.implemented_fields(raw), typ)
    except msgspec.ValidationError as e:
        raise from_msgspec(e) from None


def json_response(data: Any, status_code: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status_code, media_type="application/json")


def sse(data: Any) -> bytes:
    return b"data: " + msgspec.json.encode(data) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def finish_error(chunk: dict[str, Any]) -> RequestError | None:
    """A scheduler-side rejection (finish type abort with a status other than 499) as an error."""
    fin = chunk.get("meta_info", {}).get("finish_reason") or {}
    status = fin.get("status_code")
    if fin.get("type") == "abort" and status is not None and status != 499:
        return RequestError(
            fin.get("message", "request failed"), field=fin.get("field"), status_code=status
        )
    return None


def served_model_id(config: FrontendConfig) -> str:
    """The model name clients see: `--served-model-name`, else the checkpoint folder's name."""
    return config.served_model_name or Path(config.checkpoint.model_path).name


async def prepend(first: T, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    """`first`, then everything from `rest` (a stream whose head was awaited for its errors)."""
    yield first
    async for item in rest:
        yield item


class EventStream(StreamingResponse):
    """The SSE response of every streaming route.

    A client that goes away mid-stream (or is cut off for not reading, see
    entrypoints/http_guard.py) surfaces as ClientDisconnected from the TokenizerManager's
    generator; its request was aborted on the way out (`close_response`) and nothing is left to
    send, so the stream just ends: the error handlers cannot answer a started response.
    """

    media_type = "text/event-stream"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        with contextlib.suppress(ClientDisconnected):
            await super().__call__(scope, receive, send)


async def close_response(tm: TokenizerManager, gen: Any, rids: list[str]) -> None:
    """End a response stream whose client may be gone.

    A disconnect cancels the streaming task and, under anyio, every later await with it: so
    abort synchronously first (a no-op once finished), then close the generator best-effort.
    """
    tm.abort_if_pending(rids)
    await gen.aclose()
