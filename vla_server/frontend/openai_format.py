"""The response objects of `/v1/chat/completions` and `/v1/completions`, from the node's output
chunks (`TokenizerManager.generate_request` with every item `in_batch`, so each chunk carries
its choice `index`).

Logprobs come from `meta_info.output_token_logprobs` / `output_top_logprobs` (asked for with
`return_text_in_logprobs`, so each entry is `[logprob, token id, token text]`): chat's
`{"content": [{token, logprob, bytes, top_logprobs}]}`, completions' `{tokens, token_logprobs,
top_logprobs, text_offset}`. The usage counts each prompt once however many samples it has.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from vla_server.frontend.openai_protocol import finish_reason_name


class _Response:
    """What both routes' objects share: the head, the usage, the per-choice bookkeeping."""

    chunk_object = ""

    def __init__(self, id_prefix: str, model: str, n: int, stream_options: Any = None):
        self.id = f"{id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.n = n  # samples per prompt: choice i * n is prompt i's first
        self.include_usage = stream_options is not None and stream_options.include_usage
        self.continuous = stream_options is not None and stream_options.continuous_usage_stats
        self.metas: dict[int, dict[str, Any]] = {}  # latest meta_info per choice

    def head(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def usage(self) -> dict[str, Any]:
        firsts = [m for i, m in self.metas.items() if i % self.n == 0]
        prompt = sum(m["prompt_tokens"] for m in firsts)
        completion = sum(m["completion_tokens"] for m in self.metas.values())
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(m["cached_tokens"] for m in firsts)},
        }

    def chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        out = self.head(self.chunk_object, [choice])
        if self.continuous:
            out["usage"] = self.usage()
        elif self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self) -> dict[str, Any]:
        return {**self.head(self.chunk_object, []), "usage": self.usage()}

    def observe(self, out: dict[str, Any]) -> None:
        self.metas[out["index"]] = out["meta_info"]


def _finish(out: dict[str, Any]) -> str | None:
    finish = out["meta_info"]["finish_reason"]
    return None if finish is None else finish_reason_name(finish)


def _token_entry(entry: list[Any]) -> dict[str, Any]:
    lp, _, text = entry
    return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}


class ChatResponse(_Response):
    chunk_object = "chat.completion.chunk"

    def __init__(self, model: str, n: int, stream_options: Any, logprobs: bool):
        super().__init__("chatcmpl", model, n, stream_options)
        self.logprobs = logprobs

    def opening(self, num_choices: int) -> list[dict[str, Any]]:
        """The role delta of each choice, before any content."""
        return [
            self.chunk(_choice(i, {"role": "assistant", "content": ""}, None, None))
            for i in range(num_choices)
        ]

    def deltas(self, out: dict[str, Any]) -> list[dict[str, Any]]:
        """A content delta (with its logprobs) when there is new text, then the finish."""
        self.observe(out)
        i, chunks = out["index"], []
        if out["text"] or out["output_ids"]:
            delta = {"content": out["text"]}
            chunks.append(self.chunk(_choice(i, delta, self._logprobs(out["meta_info"]), None)))
        finish = _finish(out)
        if finish is not None:
            chunks.append(self.chunk(_choice(i, {}, None, finish)))
        return chunks

    def full(self, outs: list[dict[str, Any]]) -> dict[str, Any]:
        choices = []
        for out in outs:
            self.observe(out)
            message = {"role": "assistant", "content": out["text"]}
            logprobs = self._logprobs(out["meta_info"])
            choices.append(_choice(out["index"], None, logprobs, _finish(out), message))
        return {**self.head("chat.completion", choices), "usage": self.usage()}

    def _logprobs(self, meta: dict[str, Any]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        tokens = meta.get("output_token_logprobs", [])
        tops = meta.get("output_top_logprobs") or [[] for _ in tokens]
        content = [
            {**_token_entry(t), "top_logprobs": [_token_entry(a) for a in top]}
            for t, top in zip(tokens, tops, strict=True)
        ]
        return {"content": content}


def _choice(
    index: int,
    delta: dict[str, Any] | None,
    logprobs: dict[str, Any] | None,
    finish: str | None,
    message: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = {"delta": delta} if message is None else {"message": message}
    return {"index": index, **body, "logprobs": logprobs, "finish_reason": finish}


class CompletionResponse(_Response):
    chunk_object = "text_completion"

    def __init__(self, model: str, n: int, stream_options: Any, logprobs: int | None):
        super().__init__("cmpl", model, n, stream_options)
        self.logprobs = logprobs
        self.offsets: dict[int, int] = {}  # characters of text so far, per choice

    def deltas(self, out: dict[str, Any]) -> list[dict[str, Any]]:
        self.observe(out)
        if not (out["text"] or out["output_ids"]) and _finish(out) is None:
            return []
        return [self.chunk(self._choice(out))]

    def full(self, outs: list[dict[str, Any]]) -> dict[str, Any]:
        for out in outs:
            self.observe(out)
        choices = [self._choice(out) for out in outs]
        return {**self.head("text_completion", choices), "usage": self.usage()}

    def _choice(self, out: dict[str, Any]) -> dict[str, Any]:
        i = out["index"]
        return {
            "index": i,
            "text": out["text"],
            "logprobs": self._logprobs(i, out["meta_info"]),
            "finish_reason": _finish(out),
        }

    def _logprobs(self, index: int, meta: dict[str, Any]) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        tokens = meta.get("output_token_logprobs", [])
        tops = meta.get("output_top_logprobs") or [[] for _ in tokens]
        offsets, at = [], self.offsets.get(index, 0)
        for _, _, text in tokens:
            offsets.append(at)
            at += len(text)
        self.offsets[index] = at
        return {
            "tokens": [t[2] for t in tokens],
            "token_logprobs": [t[0] for t in tokens],
            "top_logprobs": [{a[2]: a[0] for a in top} for top in tops],
            "text_offset": offsets,
        }
