"""Pieces the extra front ends (OpenAI, actions, openpi) share on top of the TokenizerManager."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from vla_server.errors import RequestError, from_msgspec
from vla_server.server_args import ServerArgs

T = TypeVar("T")


def decode_body(body: bytes, typ: type[T]) -> T:
    """A JSON request body as `typ`; a malformed body or a bad field is a RequestError."""
    try:
        return msgspec.json.decode(body or b"{}", type=typ)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise from_msgspec(e) from None


def sse(data: Any) -> bytes:
    return b"data: " + msgspec.json.encode(data) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def finish_error(chunk: dict[str, Any]) -> RequestError | None:
    """A scheduler-side rejection (finish type abort with a status other than 499) as an error."""
    fin = chunk.get("meta_info", {}).get("finish_reason") or {}
    status = fin.get("status_code")
    if fin.get("type") == "abort" and status is not None and status != 499:
        return RequestError(fin.get("message", "request failed"), status_code=status)
    return None


def served_model_id(args: ServerArgs) -> str:
    """The model name clients see: `--served-model-name`, else the checkpoint folder's name."""
    return args.served_model_name or Path(args.model_path or "model").name


async def prepend(first: T, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    """`first`, then everything from `rest` (a stream whose head was awaited for its errors)."""
    yield first
    async for item in rest:
        yield item
