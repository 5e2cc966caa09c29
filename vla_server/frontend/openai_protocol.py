"""OpenAI chat-completions wire types: the request we accept and the objects we send back.

Accepted request fields: `model`, `messages` (roles system/user/assistant; `content` a string or
a list of `{"type": "text", "text"}` / `{"type": "image_url", "image_url": {"url"} | url}` parts),
`max_tokens` / `max_completion_tokens`, `temperature`, `top_p`, `seed`, `stop`, `n` (1 only),
`stream`, `stream_options.include_usage`, `user` (ignored). Anything else is a 400 naming the field,
so a client never believes an option took effect when it did not.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from vla_server.errors import RequestError


class ImageURL(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    detail: str | None = None  # accepted for compatibility; images are always preprocessed alike


class TextPart(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True):
    text: str


class ImagePart(msgspec.Struct, tag_field="type", tag="image_url", forbid_unknown_fields=True):
    image_url: ImageURL | str

    @property
    def url(self) -> str:
        return self.image_url if isinstance(self.image_url, str) else self.image_url.url


class ChatMessage(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["system", "user", "assistant"]
    content: str | list[TextPart | ImagePart] | None = None
    name: str | None = None


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True):
    include_usage: bool = False


class ChatRequest(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[ChatMessage]
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    def check(self) -> None:
        if not self.messages:
            raise RequestError("must hold at least one message", "messages")
        if self.n != 1:
            raise RequestError("only n=1 is supported", "n")
        if self.stream_options is not None and not self.stream:
            raise RequestError("stream_options is only allowed with stream: true", "stream_options")
        for name in ("max_completion_tokens", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise RequestError("must be >= 1", name)

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


def hf_messages(messages: list[ChatMessage]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Messages in the Hugging Face chat-template form, the image URLs in prompt order, and
    for each image the request field it came from."""
    out: list[dict[str, Any]] = []
    urls: list[str] = []
    fields: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m.content, list):
            out.append({"role": m.role, "content": m.content or ""})
            continue
        parts: list[dict[str, Any]] = []
        for j, part in enumerate(m.content):
            if isinstance(part, TextPart):
                parts.append({"type": "text", "text": part.text})
            else:
                parts.append({"type": "image"})
                urls.append(part.url)
                fields.append(f"messages[{i}].content[{j}].image_url")
        out.append({"role": m.role, "content": parts})
    return out, urls, fields


_ERROR_TYPES = {
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def openai_error_body(e: RequestError, code: str | None = None) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(e.status_code)
    if kind is None:
        kind = "server_error" if e.status_code >= 500 else "invalid_request_error"
    return {"error": {"message": e.message, "type": kind, "param": e.field, "code": code}}


def finish_reason_name(finish: dict[str, Any]) -> str:
    """OpenAI's names for "length" and "stop"; any other node reason (abort, ...) as is."""
    return str(finish.get("type", "stop"))


def usage(meta: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = meta["prompt_tokens"], meta["completion_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": meta["cached_tokens"]},
    }
