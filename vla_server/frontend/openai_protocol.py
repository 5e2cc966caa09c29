"""OpenAI chat-completions and completions wire types: the requests we accept.

Each body is checked against its field table first (`field_tables.py`: OpenAI's fields and
SGLang's extensions, implemented, ignored or accepted at their default only); the structs here
hold the implemented fields. `messages` take roles system/user/assistant, `content` a string or
a list of `{"type": "text", "text"}` / `{"type": "image_url", "image_url": {"url"} | url}` parts.
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
    include_usage: bool = False  # a last chunk with the usage and no choices
    continuous_usage_stats: bool = False  # the usage so far in every chunk


class _SamplingRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The fields both routes implement: OpenAI's sampling options and SGLang's extensions."""

    model: str | None = None
    max_tokens: int | None = None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    no_stop_trim: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = None
    rid: str | None = None
    priority: int | None = None
    session_id: str | None = None

    def check(self) -> None:
        if self.n < 1:
            raise RequestError("must be >= 1", "n")
        if self.stream_options is not None and not self.stream:
            raise RequestError("stream_options is only allowed with stream: true", "stream_options")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RequestError("must be >= 1", "max_tokens")

    def sampling(self, max_new_tokens: int) -> dict[str, Any]:
        """The request's sampling parameters in SGLang's names."""
        return {
            "max_new_tokens": max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "repetition_penalty": self.repetition_penalty,
            "min_new_tokens": self.min_tokens,
            "logit_bias": self.logit_bias,
            "sampling_seed": self.seed,
            "stop": [self.stop] if isinstance(self.stop, str) else self.stop or [],
            "stop_token_ids": self.stop_token_ids or [],
            "ignore_eos": self.ignore_eos,
            "no_stop_trim": self.no_stop_trim,
            "skip_special_tokens": self.skip_special_tokens,
            "spaces_between_special_tokens": self.spaces_between_special_tokens,
            "n": self.n,
        }

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.continuous_usage_stats


class ChatRequest(_SamplingRequest, kw_only=True):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None  # OpenAI's newer name; wins over max_tokens
    logprobs: bool = False
    top_logprobs: int | None = None
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    def check(self) -> None:
        super().check()
        if not self.messages:
            raise RequestError("must hold at least one message", "messages")
        if self.max_completion_tokens is not None and self.max_completion_tokens < 1:
            raise RequestError("must be >= 1", "max_completion_tokens")
        if self.top_logprobs is not None:
            if not self.logprobs:
                raise RequestError("needs logprobs: true", "top_logprobs")
            if not 0 <= self.top_logprobs <= 20:
                raise RequestError("must be in [0, 20]", "top_logprobs")
        if self.continue_final_message and self.messages[-1].role != "assistant":
            raise RequestError("the last message must be the assistant's", "continue_final_message")

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingRequest, kw_only=True):
    prompt: str | list[Any]  # text, texts, token ids or lists of token ids
    best_of: int | None = None  # only n (the n samples are all returned)
    logprobs: int | None = None  # top alternatives per token, besides the chosen one

    def check(self) -> None:
        super().check()
        if self.best_of is not None and self.best_of != self.n:
            if self.best_of < self.n:
                raise RequestError("must be >= n", "best_of")
            raise RequestError(
                "`best_of` > n is not supported by this server (accepted: null or n)", "best_of"
            )
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise RequestError("must be in [0, 20]", "logprobs")

    def prompts(self) -> tuple[str, list[Any]]:
        """("text", texts) or ("input_ids", token id lists)."""
        p = self.prompt
        if isinstance(p, str):
            return "text", [p]
        if p and all(isinstance(x, str) for x in p):
            return "text", list(p)
        if p and all(type(x) is int for x in p):
            return "input_ids", [p]
        if p and all(isinstance(x, list) and x and all(type(t) is int for t in x) for x in p):
            return "input_ids", list(p)
        raise RequestError(
            "must be a string, a list of strings, a list of token ids or a list of such lists",
            "prompt",
        )


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
