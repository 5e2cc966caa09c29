"""OpenAI-compatible routes on the TokenizerManager: `POST /v1/chat/completions`,
`POST /v1/completions`, `GET /v1/models`.

Both generation routes build the same normalised `GenerateItem`s as `POST /generate` (one per
prompt, expanded to `n` samples by `generate_request.expand_samples`) and format the node's
output chunks as OpenAI's objects (`openai_format.py`). Chat messages are rendered with the
checkpoint's chat template (image parts become the image placeholder) and tokenized here;
images travel as `image_data` in prompt order, so decoding, hashing and the embedding cache work
exactly as for `POST /generate`. Without `max_tokens` a chat completion may use the rest of the
context; a completion stops at 16 tokens (OpenAI's default). Errors use OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`, with `param` naming the request field (an
image's `messages[i].content[j].image_url`). The model id is the checkpoint folder's name; a
request may name it or the full path, or leave `model` out.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import Response

from vla_server.errors import RequestError
from vla_server.frontend.chat_prompt import chat_prompt_ids
from vla_server.frontend.common import (
    SSE_DONE,
    EventStream,
    close_response,
    finish_error,
    json_response,
    prepend,
    request_body,
    served_model_id,
    sse,
)
from vla_server.frontend.field_tables import CHAT_COMPLETIONS, COMPLETIONS
from vla_server.frontend.generate_request import (
    GenerateItem,
    check_batch_size,
    expand_samples,
    parse_sampling,
)
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.openai_format import ChatResponse, CompletionResponse
from vla_server.frontend.openai_protocol import (
    ChatRequest,
    CompletionRequest,
    hf_messages,
    openai_error_body,
)
from vla_server.frontend.tokenizer_manager import TokenizerManager

_IMAGE_FIELD = re.compile(r"^image_data\[(\d+)\]")
_SAMPLING_PARAM = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "sampling_seed": "seed",
}
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
_Format = ChatResponse | CompletionResponse


def _param(field: str | None, image_fields: list[str], prompt: str, max_tokens: str) -> str | None:
    """A node field name (`image_data[1]`, `sampling_params.top_p`) as the OpenAI request's:
    its prompt is `prompt` (messages or prompt), its length limit `max_tokens` as it wrote it."""
    if field is None:
        return None
    m = _IMAGE_FIELD.match(field)
    if m and int(m.group(1)) < len(image_fields):
        return image_fields[int(m.group(1))]
    if field in ("image_data", "input_ids", "text"):
        return prompt
    if field.startswith("sampling_params"):
        name = field.split(".", 1)[-1]
        return max_tokens if name == "max_new_tokens" else _SAMPLING_PARAM.get(name, name)
    return field


def _error(
    e: RequestError,
    image_fields: list[str],
    prompt: str = "messages",
    body: ChatRequest | CompletionRequest | None = None,
) -> Response:
    code = "model_not_found" if e.status_code == 404 and e.field == "model" else None
    newer = body is not None and getattr(body, "max_completion_tokens", None) is not None
    e.field = _param(
        e.field, image_fields, prompt, "max_completion_tokens" if newer else "max_tokens"
    )
    return json_response(openai_error_body(e, code), e.status_code)


def _default_max_tokens(tm: TokenizerManager, ids: list[int], num_images: int) -> int:
    """The rest of the context after the prompt with its images expanded."""
    assert tm.limits is not None
    token = tm.policy.image_token_id
    placeholders = ids.count(token) if token is not None else 0
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

    def check_model(body: ChatRequest | CompletionRequest) -> None:
        if body.model is not None and body.model not in names:
            raise RequestError(f"the model {body.model!r} does not exist", "model", 404)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        image_fields: list[str] = []
        body = None
        try:
            body = await request_body(request, ChatRequest, CHAT_COMPLETIONS)
            body.check()
            check_model(body)
            messages, urls, image_fields = hf_messages(body.messages)
            fmt = ChatResponse(model, body.n, body.stream_options, body.logprobs)
            items = await _chat_items(tm, body, messages, urls, body.rid or fmt.id)
            return await _respond(tm, items, request, fmt)
        except RequestError as e:
            return _error(e, image_fields, "messages", body)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        try:
            body = await request_body(request, CompletionRequest, COMPLETIONS)
            body.check()
            check_model(body)
            fmt = CompletionResponse(model, body.n, body.stream_options, body.logprobs)
            items = _completion_items(tm, body, body.rid or fmt.id)
            return await _respond(tm, items, request, fmt)
        except RequestError as e:
            return _error(e, [], "prompt")


async def _chat_items(
    tm: TokenizerManager,
    body: ChatRequest,
    messages: list[dict[str, Any]],
    urls: list[str],
    rid: str,
) -> list[GenerateItem]:
    """The chat's prompt rendered by the chat template, as `n` items. The completion's id is
    the request's (unless the body names one), so POST /abort_request can name it."""
    ids = await tm.text_encoder.run(
        len(msgspec.json.encode(messages)),
        "messages",
        lambda tokenizer: chat_prompt_ids(
            tokenizer,
            messages,
            "messages",
            continue_final_message=body.continue_final_message,
            template_kwargs=body.chat_template_kwargs,
        ),
    )
    max_new = body.max_new_tokens or _default_max_tokens(tm, ids, len(urls))
    item = _item(
        tm,
        body,
        rid,
        max_new,
        input_ids=ids,
        images=urls,
        return_logprob=body.logprobs,
        top_logprobs_num=body.top_logprobs or 0,
    )
    return expand_samples([item], body.n, "n")


def _completion_items(
    tm: TokenizerManager, body: CompletionRequest, rid: str
) -> list[GenerateItem]:
    """One item per prompt, each expanded to `n` samples (choice i * n + j)."""
    kind, prompts = body.prompts()
    check_batch_size(len(prompts), "prompt")
    max_new = body.max_tokens or COMPLETION_DEFAULT_MAX_TOKENS
    items = []
    for i, p in enumerate(prompts):
        item = _item(
            tm,
            body,
            rid if len(prompts) == 1 else f"{rid}-{i}",
            max_new,
            index=i,
            return_logprob=body.logprobs is not None,
            top_logprobs_num=body.logprobs or 0,
            **{kind: p},
        )
        items.append(item)
    return expand_samples(items, body.n, "prompt")


def _item(
    tm: TokenizerManager,
    body: ChatRequest | CompletionRequest,
    rid: str,
    max_new_tokens: int,
    **fields: Any,
) -> GenerateItem:
    """The normalised request of one prompt (`text`, `input_ids`, `images`, and the item's other
    `fields`) of an OpenAI body; every OpenAI item is `in_batch`, so each output chunk names its
    choice."""
    assert tm.limits is not None
    return GenerateItem(
        rid=rid,
        sampling_params=parse_sampling(body.sampling(max_new_tokens), tm.limits),
        stream=body.stream,
        return_text_in_logprobs=True,
        in_batch=True,
        priority=body.priority,
        session_id=body.session_id,
        **fields,
    )


async def _respond(
    tm: TokenizerManager, items: list[GenerateItem], request: Request, fmt: _Format
) -> Response:
    gen = tm.generate_request(items, request)
    if not items[0].stream:
        outs = [o async for o in gen][-1]
        assert isinstance(outs, list)
        for out in outs:
            err = finish_error(out)
            if err is not None:
                raise err
        return json_response(fmt.full(outs))
    first = await gen.__anext__()
    assert isinstance(first, dict)
    err = finish_error(first)
    if err is not None and not first.get("output_ids"):
        await gen.aclose()
        raise err
    rids = [it.rid for it in items]
    return EventStream(_stream(tm, fmt, len(items), first, gen, rids))


async def _stream(
    tm: TokenizerManager,
    fmt: _Format,
    num_choices: int,
    first: dict[str, Any],
    gen: AsyncIterator[Any],
    rids: list[str],
) -> AsyncIterator[bytes]:
    """Chat's role deltas first, then each choice's deltas and finish as they come, the usage
    chunk if asked, `[DONE]`."""
    try:
        if isinstance(fmt, ChatResponse):
            for chunk in fmt.opening(num_choices):
                yield sse(chunk)
        async for out in prepend(first, gen):
            err = finish_error(out)
            if err is not None:
                raise err
            for chunk in fmt.deltas(out):
                yield sse(chunk)
        if fmt.include_usage:
            yield sse(fmt.usage_chunk())
    except RequestError as e:  # the engine failed or the request was rejected mid-stream
        yield sse(openai_error_body(e))
    finally:
        await close_response(tm, gen, rids)
    yield SSE_DONE
