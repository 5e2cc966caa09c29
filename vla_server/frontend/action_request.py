"""One action query (images + instruction -> action vectors) on the TokenizerManager, with timing.

Shared by `POST /v1/actions`, the openpi policy WebSocket and the robot doors: each parses its
body into an `ActionsBody` (the /v1/actions body; the others map onto it), and `action_item`
makes the normalised request. The prompt, the images in prompt order and any state that rides
beside it are the policy family's (`PolicyFrontend.query_prompt`); sampling is greedy unless the
caller sets a temperature; a denoised chunk starts from the noise of `seed`
(`model/denoise.initial_noise`). The query always runs as a stream inside the node, so each
action's completion time is known even when the caller wants one reply.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from vla_server.errors import RequestError
from vla_server.frontend.common import finish_error
from vla_server.frontend.generate_request import GenerateItem, parse_sampling
from vla_server.frontend.guidance_request import guidance_ask
from vla_server.frontend.noise_request import checked_noise
from vla_server.frontend.tokenizer_manager import TokenizerManager
from vla_server.io_struct import RtcOptions
from vla_server.policies.base import ActionQuery


class ActionFailed(RuntimeError):
    """The node could not turn the generated tokens into actions (finish type action_error)."""


class ActionsBody(msgspec.Struct, forbid_unknown_fields=True):
    instruction: str
    # One image or a list (cameras), any form POST /generate accepts; for a policy with named
    # cameras also a map keyed by camera name.
    image_data: Any = None
    unnorm_key: str | None = None
    num_actions: int | None = None  # None: the policy's default (1, or its whole chunk)
    state: Any = None  # raw robot state (policies that read one)
    relaxed_decoding: bool = False  # a token chunk: LeRobot's pad/truncate decoding
    mm_hashes: Any = None
    temperature: float = 0.0
    seed: int | None = None
    rid: str | None = None
    return_token_ids: bool = False
    stream: bool = False
    # Real-time chunking (`guidance_request.py`): the previous chunk's unexecuted tail (raw).
    prev_chunk: list[list[float]] | None = None
    inference_delay: int | None = None
    execution_horizon: int | None = None  # LeRobot's: where the soft prefix weights end
    rtc: RtcOptions | None = None
    # A denoised chunk's starting noise [chunk_size, head width] instead of the seed's
    # (`noise_request.py`).
    noise: Any = None


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


@dataclass
class ActionTiming:
    """Per-stage times in ms since the front end took the query (None: not reached yet)."""

    start: float = field(default_factory=time.perf_counter)
    prompt_ms: float | None = None  # chat template + tokenization in the front end
    preprocess_ms: float | None = None  # TokenizerManager: tokenize + image decode/resize/hash
    queue_ms: float | None = None  # in the scheduler's queue, until the first forward
    first_token_ms: float | None = None  # first generated token seen by the front end
    time_to_first_action_ms: float | None = None  # TokenizerManager: request state -> action
    action_done_ms: list[float] = field(default_factory=list)  # each action's arrival
    e2e_ms: float | None = None

    def since_start(self) -> float:
        return _ms(time.perf_counter() - self.start)

    def observe(self, chunk: dict[str, Any], new_actions: int) -> None:
        now = self.since_start()
        if self.first_token_ms is None and chunk.get("output_ids"):
            self.first_token_ms = now
        self.action_done_ms += [now] * new_actions
        meta = chunk["meta_info"]
        for name, key in (
            ("preprocess_ms", "preprocess_time"),
            ("queue_ms", "queue_time"),
            ("time_to_first_action_ms", "time_to_first_action"),
        ):
            if meta.get(key) is not None:
                setattr(self, name, _ms(meta[key]))
        if meta.get("finish_reason") is not None:
            self.e2e_ms = now

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_ms": self.prompt_ms,
            "preprocess_ms": self.preprocess_ms,
            "queue_ms": self.queue_ms,
            "time_to_first_token_ms": self.first_token_ms,
            "time_to_first_action_ms": self.time_to_first_action_ms,
            "action_done_ms": self.action_done_ms,
            "e2e_ms": self.e2e_ms,
        }


@dataclass
class ActionUpdate:
    actions: list[list[float]]  # completed since the previous update
    output_ids: list[int]
    meta: dict[str, Any]

    @property
    def finished(self) -> bool:
        return self.meta.get("finish_reason") is not None


async def action_item(
    tm: TokenizerManager, body: ActionsBody, timing: ActionTiming
) -> GenerateItem:
    """The normalised request of an action query; records the prompt's time in `timing`."""
    if not body.instruction.strip():
        raise RequestError("must be a non-empty string", "instruction")
    if body.temperature < 0:
        raise RequestError("must be >= 0", "temperature")
    assert tm.limits is not None
    policy = tm.policy
    if policy.action_dim is None:
        raise RequestError("this model has no action head", "num_actions")
    guidance = guidance_ask(body.prev_chunk, body.inference_delay, body.execution_horizon, body.rtc)
    query = ActionQuery(
        instruction=body.instruction,
        image_data=body.image_data,
        state=body.state,
        relaxed_decoding=body.relaxed_decoding,
        return_token_ids=body.return_token_ids,
        temperature=body.temperature,
    )
    prompt = await policy.query_prompt(query, tm.text_encoder)
    timing.prompt_ms = timing.since_start()
    # With the node's and the session's defaults now, so the reply names what the query used.
    item = GenerateItem(
        rid=body.rid or uuid.uuid4().hex,
        sampling_params=parse_sampling(
            {"temperature": body.temperature, "seed": body.seed}, tm.limits
        ),
        input_ids=prompt.input_ids,
        images=prompt.images,
        mm_hashes=body.mm_hashes,
        unnorm_key=body.unnorm_key,
        num_actions=(policy.default_num_actions if body.num_actions is None else body.num_actions),
        stream=True,
        relaxed_decoding=body.relaxed_decoding,
        state=prompt.state,
        guidance=guidance,
        noise=checked_noise(tm, body.noise),
    )
    return tm.sessions.apply(item, robot=True)


async def stream_actions(
    tm: TokenizerManager, item: GenerateItem, timing: ActionTiming, request: Any = None
) -> AsyncIterator[ActionUpdate]:
    """Action updates as the node completes them; errors before the first one are raised.

    Raises RequestError for bad input (before any update) or a scheduler rejection, and
    ActionFailed when decoding the action tokens fails.
    """
    gen = tm.generate_request([item], request, robot_defaults=True)
    try:
        async for chunk in gen:
            assert isinstance(chunk, dict)
            err = finish_error(chunk)
            if err is not None:
                raise err
            new = chunk.get("actions") or []
            timing.observe(chunk, len(new))
            fin = chunk["meta_info"].get("finish_reason") or {}
            if fin.get("type") == "action_error":
                raise ActionFailed(fin.get("message", "action decoding failed"))
            yield ActionUpdate(new, chunk.get("output_ids") or [], chunk["meta_info"])
    finally:
        await gen.aclose()
