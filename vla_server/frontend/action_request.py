"""One action query (images + instruction -> action vectors) on the TokenizerManager, with timing.

Shared by `POST /v1/actions` and the openpi policy WebSocket: both parse their body into an
`ActionsBody` (the /v1/actions body; an openpi observation maps onto it), and `action_item` makes
the normalised request. The prompt is the checkpoint's chat template over one user turn,
instruction first and images last (see `instruction_messages`), or for an OpenVLA checkpoint
OpenVLA's own prompt (`openvla_prompt`), or for pi0-FAST its task-and-state prompt
(`pi0fast_prompt`, with the cameras and state of `pi0fast_request`); sampling is greedy unless
the caller sets a temperature. The query always runs as a stream inside the node, so each action's
completion time is known even when the caller wants one reply.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from vla_server.errors import RequestError
from vla_server.frontend.chat_prompt import chat_prompt_ids, instruction_messages
from vla_server.frontend.common import finish_error
from vla_server.frontend.generate_request import GenerateItem, parse_sampling
from vla_server.frontend.openvla_prompt import action_prompt
from vla_server.frontend.pi0fast_request import camera_images, state_bins
from vla_server.frontend.tokenizer_manager import TokenizerManager
from vla_server.multimodal.fast_actions import FastActionTokenizer


class ActionFailed(RuntimeError):
    """The node could not turn the generated tokens into actions (finish type action_error)."""


class ActionsBody(msgspec.Struct, forbid_unknown_fields=True):
    instruction: str
    # One image or a list (cameras), any form POST /generate accepts; for pi0-FAST also a map
    # keyed by camera name.
    image_data: Any = None
    unnorm_key: str | None = None
    num_actions: int | None = None  # None: 1, or a pi0-FAST checkpoint's whole chunk
    state: Any = None  # raw robot state (pi0-FAST)
    relaxed_decoding: bool = False  # pi0-FAST: LeRobot's pad/truncate decoding
    mm_hashes: Any = None
    temperature: float = 0.0
    seed: int | None = None
    rid: str | None = None
    return_token_ids: bool = False
    stream: bool = False


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


def resolved_unnorm_key(tm: TokenizerManager, unnorm_key: str | None) -> str | None:
    """The statistics key a query uses (the single key when the caller gives none)."""
    actions = tm.mm.actions
    if actions is None:
        raise RequestError("this model has no action tokenizer", "num_actions")
    try:
        return actions.resolve_unnorm_key(unnorm_key)
    except ValueError as e:
        raise RequestError(str(e), "unnorm_key") from None


async def action_item(
    tm: TokenizerManager, body: ActionsBody, timing: ActionTiming
) -> GenerateItem:
    """The normalised request of an action query; records the prompt's time in `timing`."""
    if not body.instruction.strip():
        raise RequestError("must be a non-empty string", "instruction")
    if body.temperature < 0:
        raise RequestError("must be >= 0", "temperature")
    assert tm.limits is not None
    fast = tm.mm.fast
    if fast is not None:
        images = camera_images(fast, body.image_data)
        ids = await _fast_prompt_ids(tm, body)
    else:
        images = _images(body)
        ids = await _prompt_ids(tm, body.instruction, len(images))
    timing.prompt_ms = timing.since_start()
    return GenerateItem(
        rid=body.rid or uuid.uuid4().hex,
        sampling_params=parse_sampling(
            {"temperature": body.temperature, "seed": body.seed}, tm.limits
        ),
        input_ids=ids,
        images=images,
        mm_hashes=body.mm_hashes,
        unnorm_key=body.unnorm_key,
        num_actions=_num_actions(body, fast),
        stream=True,
        relaxed_decoding=body.relaxed_decoding,
    )


def _num_actions(body: ActionsBody, fast: FastActionTokenizer | None) -> int:
    if body.num_actions is not None:
        return body.num_actions
    return fast.horizon if fast is not None else 1


def _images(body: ActionsBody) -> list[Any]:
    """The images of a query to a model without named cameras (anything but pi0-FAST)."""
    for name in ("state", "relaxed_decoding"):
        if getattr(body, name):
            raise RequestError("only pi0-FAST checkpoints take this field", name)
    given = body.image_data if isinstance(body.image_data, list) else [body.image_data]
    images = [im for im in given if im is not None]
    if not images:
        raise RequestError("an action query needs at least one image", "image_data")
    return images


async def _fast_prompt_ids(tm: TokenizerManager, body: ActionsBody) -> list[int]:
    """pi0-FAST's `BOS "Task: ..., State: ...;\n"` (the node appends the action tail)."""
    assert tm.mm.fast is not None and tm.mm.fast_prompt is not None
    prompt = tm.mm.fast_prompt
    text = prompt.task_text(body.instruction, state_bins(tm.mm.fast, body.state))
    ids = await tm.text_encoder.encode(text, "instruction")
    prompt.check_length(ids, "instruction")
    return ids


async def _prompt_ids(tm: TokenizerManager, instruction: str, n_images: int) -> list[int]:
    if tm.mm.openvla:
        return await tm.text_encoder.encode(action_prompt(instruction), "instruction")
    messages = instruction_messages(instruction, n_images)
    return await tm.text_encoder.run(
        len(instruction),
        "instruction",
        lambda tokenizer: chat_prompt_ids(tokenizer, messages, "instruction"),
    )


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
