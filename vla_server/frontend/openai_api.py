"""OpenAI-compatible routes on the TokenizerManager: `POST /v1/chat/completions`, `GET /v1/models`.

The messages are rendered with the checkpoint's chat template (image parts become the image
placeholder) and tokenized here; images travel as `image_data` in prompt order, so decoding,
hashing and the embedding cache work exactly as for `POST /generate`. Without `max_tokens` a
completion may use the rest of the context. Errors use OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`, with `param` naming the request field (an
image's `messages[i].content[j].image_url`). The model id is the checkpoint folder's name; a
request may name it or the full path, or leave `model` out.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from vla_server.errors import RequestError
from vla_server.frontend.chat_prompt import chat_prompt_ids
from vla_server.frontend.common import (
    SSE_DONE,
    close_response,
    finish_error,
    json_response,
    prepend,
    request_body,
    served_model_id,
    sse,
)
from vla_server.frontend.generate_request import GenerateItem, parse_sampling
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.openai_protocol import (
    ChatRequest,
    finish_reason_name,
    hf_messages,
    openai_error_body,
    usage,
)
from vla_server.frontend.tokenizer_manager import ClientDisconnected, TokenizerManager

_IMAGE_FIELD = re.compile(r"^image_data\[(\d+)\]")
_SAMPLING_PARAM = {"max_new_tokens": "max_tokens"}


def _param(field: str | None, image_fields: list[str]) -> str | None:
    """A node field name (`image_data[1]`, `sampling_params.top_p`) as the OpenAI request's."""
    if field is None:
        return None
    m = _IMAGE_FIELD.match(field)
    if m and int(m.group(1)) < len(image_fields):
        return image_fields[int(m.group(1))]
    if field in ("image_data", "input_ids", "text"):
        return "messages"
    if field.startswith("sampling_params."):
        name = field.split(".", 1)[1]
        return _SAMPLING_PARAM.get(name, name)
    return field


def _error(e: RequestError, image_fields: list[str], code: str | None = None) -> Response:
    e.field = _param(e.field, image_fields)
    return json_response(openai_error_body(e, code), e.status_code)


class _Completion:
    """Builds the response objects of one chat completion."""

    def __init__(self, model: str, include_usage: bool):
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        out = self._head("chat.completion.chunk", [choice])
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk", []), "usage": usage(meta)}

    def full(self, out: dict[str, Any]) -> dict[str, Any]:
        meta = out["meta_info"]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": out["text"]},
            "logprobs": None,
            "finish_reason": finish_reason_name(meta["finish_reason"]),
        }
        return {**self._head("chat.completion", [choice]), "usage": usage(meta)}

    def _head(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def _default_max_tokens(tm: TokenizerManager, ids: list[int], num_images: int) -> int:
    """The rest of the context after the prompt with its images expanded."""
    assert tm.limits is not None
    placeholders = ids.count(tm.mm.image_token_id) if tm.mm.image_token_id is not None else 0
    prompt = len(ids) - placeholders + num_images * tm.mm.tokens_per_image
    return max(tm.limits.context_len - prompt, 1)


def add_openai_routes(app: FastAPI, node: NodeHandle) -> None:
    tm = node.tokenizer_manager
    model = served_model_id(node.config)
    names = {model, node.config.checkpoint.model_path}
    created = int(time.time())

    @app.get("/v1/models")
    async def models() -> Response:
        assert tm.limits is not None
        card = {
            "id": model,
            "object": "model",
            "created": created,
            "owned_by": "vla-server",
            "root": node.config.checkpoint.model_path,
            "max_model_len": tm.limits.context_len,
        }
        return json_response({"object": "list", "data": [card]})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        image_fields: list[str] = []
        try:
            body = await request_body(request, ChatRequest)
            body.check()
            if body.model is not None and body.model not in names:
                err = RequestError(f"the model {body.model!r} does not exist", "model", 404)
                return _error(err, image_fields, "model_not_found")
            messages, urls, image_fields = hf_messages(body.messages)
            completion = _Completion(model, body.include_usage)
            ids = chat_prompt_ids(tm.tokenizer, messages, "messages")
            # The completion's id is the request's, so POST /abort_request can name it.
            item = _item(tm, body, ids, urls, completion.id)
            return await _respond(tm, item, request, completion)
        except RequestError as e:
            return _error(e, image_fields)


def _item(
    tm: TokenizerManager, body: ChatRequest, ids: list[int], urls: list[str], rid: str
) -> GenerateItem:
    """The normalised request of a chat completion."""
    assert tm.limits is not None
    params = {
        "max_new_tokens": body.max_new_tokens or _default_max_tokens(tm, ids, len(urls)),
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "stop": [body.stop] if isinstance(body.stop, str) else body.stop or [],
    }
    return GenerateItem(
        rid=rid,
        sampling_params=parse_sampling(params, tm.limits),
        input_ids=ids,
        images=urls,
        stream=body.stream,
    )


async def _respond(
    tm: TokenizerManager, item: GenerateItem, request: Request, c: _Completion
) -> Response:
    gen = tm.generate_request([item], request)
    if not item.stream:
        try:
            out = [o async for o in gen][-1]
        except ClientDisconnected:
            return Response(status_code=499)
        assert isinstance(out, dict)
        err = finish_error(out)
        if err is not None:
            raise err
        return json_response(c.full(out))
    first = await gen.__anext__()
    assert isinstance(first, dict)
    err = finish_error(first)
    if err is not None and not first.get("output_ids"):
        await gen.aclose()
        raise err
    return StreamingResponse(_stream(tm, c, first, gen), media_type="text/event-stream")


async def _stream(
    tm: TokenizerManager, c: _Completion, first: dict[str, Any], gen: AsyncIterator[Any]
) -> AsyncIterator[bytes]:
    """Role first, then content deltas, a finish chunk, the usage chunk if asked, `[DONE]`."""
    try:
        yield sse(c.chunk({"role": "assistant", "content": ""}))
        async for out in prepend(first, gen):
            err = finish_error(out)
            if err is not None:
                raise err
            if out["text"]:
                yield sse(c.chunk({"content": out["text"]}))
            finish = out["meta_info"]["finish_reason"]
            if finish is not None:
                yield sse(c.chunk({}, finish_reason_name(finish)))
                if c.include_usage:
                    yield sse(c.usage_chunk(out["meta_info"]))
                break
    except ClientDisconnected:
        return
    except RequestError as e:  # the engine failed or the request was rejected mid-stream
        yield sse(openai_error_body(e))
    finally:
        await close_response(tm, gen, [c.id])
    yield SSE_DONE
