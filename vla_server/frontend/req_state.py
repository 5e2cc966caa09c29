"""Per-request state in the main process and the output chunks built from it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from vla_server.frontend.generate_request import GenerateItem
from vla_server.io_struct import Logprobs, ReqOutputMeta


@dataclass
class LogprobAccum:
    output: list[list[Any]] = field(default_factory=list)
    output_top: list[list[list[Any]]] = field(default_factory=list)
    input: list[list[Any]] = field(default_factory=list)
    input_top: list[list[list[Any]]] = field(default_factory=list)


@dataclass(eq=False)
class ReqState:
    item: GenerateItem
    event: asyncio.Event = field(default_factory=asyncio.Event)
    out_list: list[dict[str, Any]] = field(default_factory=list)
    created: float = field(default_factory=time.perf_counter)
    received: float = field(default_factory=time.time)  # wall clock: deadline_ms counts from it
    finished: bool = False
    dispatched: bool = False
    abort_sent: bool = False
    first_token_time: float | None = None
    last_output_time: float | None = None
    handed_over_at: float | None = None  # its stream last woken with output (stream_order.py)
    text_chunks: list[str] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    logprobs: LogprobAccum = field(default_factory=LogprobAccum)
    actions: list[list[float]] = field(default_factory=list)
    first_action_time: float | None = None
    queue_time: float | None = None
    queue_steps: int | None = None
    preprocess_time: float | None = None  # tokenization + image decode/resize/hash, main process

    @property
    def rid(self) -> str:
        return self.item.rid


def _with_text(pairs: list[tuple[float, int]], decode: Any) -> list[list[Any]]:
    return [[lp, tid, decode(tid) if decode else None] for lp, tid in pairs]


def logprob_delta(lp: Logprobs, new_ids: list[int], decode: Any) -> LogprobAccum:
    """Turn the wire logprobs of one chunk into SGLang's (logprob, token_id, text) triples."""
    d = LogprobAccum()
    d.output = _with_text(list(zip(lp.output_vals, new_ids, strict=False)), decode)
    d.output_top = [_with_text(top, decode) for top in lp.output_top]
    d.input = [
        [v, t, decode(t) if decode else None]
        for v, t in zip(lp.input_vals, lp.input_ids, strict=True)
    ]
    d.input_top = [_with_text(top, decode) for top in lp.input_top]
    return d


def extend_logprobs(acc: LogprobAccum, d: LogprobAccum) -> None:
    acc.output += d.output
    acc.output_top += d.output_top
    acc.input += d.input
    acc.input_top += d.input_top


def meta_info(
    state: ReqState, meta: ReqOutputMeta, finish: dict[str, Any] | None, lp: LogprobAccum | None
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": state.rid,
        "prompt_tokens": meta.prompt_tokens,
        "completion_tokens": meta.completion_tokens,
        "cached_tokens": meta.cached_tokens,
        "finish_reason": finish,
        "e2e_latency": time.perf_counter() - state.created,
        "preprocess_time": state.preprocess_time,
        "queue_time": state.queue_time,
        "queue_steps": state.queue_steps,
        "num_retractions": meta.num_retractions,
    }
    if state.item.num_actions:
        info["num_actions"] = len(state.actions)
        if state.first_action_time is not None:
            info["time_to_first_action"] = state.first_action_time - state.created
    if state.item.return_logprob and lp is not None:
        info["output_token_logprobs"] = lp.output
        if state.item.top_logprobs_num:
            info["output_top_logprobs"] = lp.output_top
        if state.item.logprob_start_len >= 0:
            info["input_token_logprobs"] = lp.input
            if state.item.top_logprobs_num:
                info["input_top_logprobs"] = lp.input_top
    return info


def coalesce(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge queued streaming deltas into one chunk (text and ids concatenated, last meta)."""
    if len(chunks) == 1:
        return chunks[0]
    merged = dict(chunks[-1])
    merged["text"] = "".join(c["text"] for c in chunks)
    merged["output_ids"] = [t for c in chunks for t in c["output_ids"]]
    if "actions" in merged:
        merged["actions"] = [a for c in chunks for a in c["actions"]]
    meta = dict(merged["meta_info"])
    for key in (
        "output_token_logprobs",
        "output_top_logprobs",
        "input_token_logprobs",
        "input_top_logprobs",
    ):
        if key in meta:
            meta[key] = [x for c in chunks for x in c["meta_info"].get(key, [])]
    merged["meta_info"] = meta
    return merged
