"""`POST /v1/actions`: camera image(s) + an instruction -> un-normalised action vectors.

Request (JSON; unknown fields are a 400):
    instruction: str                     the task, e.g. "pick up the red block"
    image_data: image | [image, ...]     one per camera, any form POST /generate accepts; for
                | {camera: image}        a policy with named cameras in its camera order, or
                                         keyed by name
    unnorm_key: str                      the robot/dataset statistics (optional if the checkpoint
                                         has exactly one or the node has --default-unnorm-key)
    num_actions: int                     action vectors to return (default: the policy's, 1 or
                                         its whole chunk, and at most that chunk)
    state: [float, ...]                  the raw robot state, for a policy that reads one (the
                                         node normalises it as the policy's family does)
    relaxed_decoding: bool = false       a token chunk: pad/truncate a chunk of the wrong length
                                         (LeRobot) instead of failing with action_error
    mm_hashes: str | [str, ...]          optional caller image hashes (as in POST /generate)
    temperature: float = 0 (greedy), seed: int, rid: str
    return_token_ids: bool = false       also return the action tokens: each action's bin ids,
                                         or a token chunk's ids, in order (the family decides)
    stream: bool = false
    prev_chunk: [[float]*dim, ...]       real-time chunking (a denoised chunk): the unexecuted
                                         tail of the previous chunk, raw (robot units)
    inference_delay: int                 actions executed from it before this chunk starts
                                         (required with prev_chunk)
    execution_horizon: int = 10          LeRobot's: where the soft prefix weights reach 0
    rtc: {schedule: "linear", max_guidance_weight: 10, jacobian: "identity"}
                                         see frontend/guidance_request.py
    noise: [[float]*width]*chunk        a denoised chunk's starting noise (the head's padded
                                         width) instead of the seed's (noise_request.py)

Reply: {"id", "object": "actions", "model", "unnorm_key", "action_dim", "actions": [[float]*dim],
"num_actions", "finish_reason", "usage": {prompt_tokens, completion_tokens, cached_tokens},
"timing": {prompt_ms, preprocess_ms, queue_ms, time_to_first_token_ms, time_to_first_action_ms,
action_done_ms: [...], e2e_ms}} (prompt, preprocessing (tokens, image decode, resize, hash) and
the scheduler queue are durations; the others are ms since the server took the request).
With `stream: true`: SSE events {"object": "actions.chunk", "index": first action's index,
"actions": [...new], "num_actions": done so far, "finish_reason": null}, the last one with the
finish reason, usage and timing, then `data: [DONE]`. Errors: 4xx {"error": {...}} before any
action; a failure after the first event is one `data: {"error": ...}` event before `[DONE]`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from vla_server.errors import RequestError
from vla_server.frontend.action_request import (
    ActionFailed,
    ActionsBody,
    ActionTiming,
    ActionUpdate,
    action_item,
    stream_actions,
)
from vla_server.frontend.common import (
    SSE_DONE,
    EventStream,
    close_response,
    json_response,
    prepend,
    request_body,
    served_model_id,
    sse,
)
from vla_server.frontend.generate_request import GenerateItem
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.tokenizer_manager import TokenizerManager


def _failed(e: ActionFailed) -> dict[str, Any]:
    return {"error": {"message": str(e), "type": "action_error"}}


class _Reply:
    """Accumulates one query's actions and builds its reply or stream events."""

    def __init__(self, tm: TokenizerManager, model: str, body: ActionsBody, item: GenerateItem):
        self.tm, self.model, self.body, self.item = tm, model, body, item
        self.rid = item.rid
        self.actions: list[list[float]] = []
        self.token_ids: list[int] = []

    def add(self, update: ActionUpdate) -> None:
        self.actions += update.actions
        self.token_ids += update.output_ids

    def event(self, update: ActionUpdate, timing: ActionTiming) -> dict[str, Any]:
        """The stream event for `update`; the final one carries the summary."""
        start = len(self.actions)
        self.add(update)
        event: dict[str, Any] = {
            "id": self.rid,
            "object": "actions.chunk",
            "index": start,
            "actions": update.actions,
            "num_actions": len(self.actions),
        }
        if self.body.return_token_ids:
            policy = self.tm.policy
            event["action_token_ids"] = policy.action_token_ids(
                self.token_ids, start, len(self.actions)
            )
        if not update.finished:
            return {**event, "finish_reason": None}
        return {**event, **self._summary(update, timing)}

    def final(self, last: ActionUpdate, timing: ActionTiming) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.rid,
            "object": "actions",
            "model": self.model,
            "actions": self.actions,
            "num_actions": len(self.actions),
        }
        if self.body.return_token_ids:
            out["action_token_ids"] = self.tm.policy.action_token_ids(
                self.token_ids, 0, len(self.actions)
            )
        return {**out, **self._summary(last, timing)}

    def _summary(self, last: ActionUpdate, timing: ActionTiming) -> dict[str, Any]:
        meta = last.meta
        policy = self.tm.policy
        return {
            # the item's: the node's default fills it when the body names none
            "unnorm_key": policy.resolve_unnorm_key(self.item.unnorm_key),
            "action_dim": policy.action_dim,
            "finish_reason": meta["finish_reason"]["type"],
            "usage": {
                "prompt_tokens": meta["prompt_tokens"],
                "completion_tokens": meta["completion_tokens"],
                "cached_tokens": meta["cached_tokens"],
            },
            "timing": timing.to_json(),
        }


def add_actions_routes(app: FastAPI, node: NodeHandle) -> None:
    tm = node.tokenizer_manager
    model = served_model_id(node.config)

    @app.post("/v1/actions")
    async def actions(request: Request) -> Response:
        timing = ActionTiming()
        body = await request_body(request, ActionsBody)
        item = await action_item(tm, body, timing)
        reply = _Reply(tm, model, body, item)
        updates = stream_actions(tm, item, timing, request)
        try:
            first = await updates.__anext__()
            if body.stream:
                return EventStream(_events(reply, first, updates, timing))
            last = first
            reply.add(first)
            async for last in updates:
                reply.add(last)
            return json_response(reply.final(last, timing))
        except ActionFailed as e:
            return json_response(_failed(e), 500)


async def _events(
    reply: _Reply, first: ActionUpdate, updates: AsyncIterator[ActionUpdate], timing: ActionTiming
) -> AsyncIterator[bytes]:
    try:
        async for update in prepend(first, updates):
            event = reply.event(update, timing)
            if update.actions or update.finished:  # token-only updates carry nothing to act on
                yield sse(event)
    except ActionFailed as e:
        yield sse(_failed(e))
    except RequestError as e:
        yield sse(e.to_json())
    finally:
        await close_response(reply.tm, updates, [reply.rid])
    yield SSE_DONE
