"""One action query (images + instruction -> action vectors) on the TokenizerManager, with timing.

Shared by `POST /v1/actions` and the openpi policy WebSocket: both parse their body into an
`ActionsBody` (the /v1/actions body; an openpi observation maps onto it), and `action_item` makes
the normalised request. The prompt is the checkpoint's chat template over one user turn,
instruction first and images last (see `instruction_messages`), or for an OpenVLA checkpoint
OpenVLA's own prompt (`openvla_prompt`), or for a pi-family policy its task-and-state prompt
(`pi0fast_prompt`, `flow_prompt`, with the cameras and state of `pi_policy_inputs`); sampling is
greedy unless the caller sets a temperature; a pi0 / pi0.5 chunk is denoised from the noise of
`seed` (`flow_actions.initial_noise`). The query always runs as a stream inside the node, so
each action's completion time is known even when the caller wants one reply.
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
from vla_server.frontend.tokenizer_manager import TokenizerManager
from vla_server.policies.openvla.prompt import action_prompt
from vla_server.policies.pi0.prompt import flow_prompt_text
from vla_server.policies.pi_common.policy_inputs import (
    camera_images,
    check_prompt_tokens,
    checked_state,
)


class ActionFailed(RuntimeError):
    """The node could not turn the generated tokens into actions (finish type action_error)."""


class ActionsBody(msgspec.Struct, forbid_unknown_fields=True):
    instruction: str
    # One image or a list (cameras), any form POST /generate accepts; for a pi-family policy
    # also a map keyed by camera name.
    image_data: Any = None
    unnorm_key: str | None = None
    num_actions: int | None = None  # None: 1, or a pi-family policy's whole chunk
    state: Any = None  # raw robot state (pi-family policies)
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
    policy = tm.mm.policy_spec
    state = None
    if policy is not None:
        images = camera_images(policy, body.image_data)
        ids, state = await _policy_prompt_ids(tm, body)
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
        num_actions=_num_actions(body, tm),
        stream=True,
        relaxed_decoding=body.relaxed_decoding,
        state=state,
    )


def _num_actions(body: ActionsBody, tm: TokenizerManager) -> int:
    if body.num_actions is not None:
        return body.num_actions
    policy = tm.mm.policy_spec
    return policy.chunk_size if policy is not None else 1


def _images(body: ActionsBody) -> list[Any]:
    """The images of a query to a model without named cameras (not a pi-family policy)."""
    for name in ("state", "relaxed_decoding"):
        if getattr(body, name):
            raise RequestError("only pi-family policies take this field", name)
    given = body.image_data if isinstance(body.image_data, list) else [body.image_data]
    images = [im for im in given if im is not None]
    if not images:
        raise RequestError("an action query needs at least one image", "image_data")
    return images


async def _policy_prompt_ids(
    tm: TokenizerManager, body: ActionsBody
) -> tuple[list[int], list[float] | None]:
    """A pi-family prompt's ids, and the state that goes beside it (pi0's state token):
    pi0-FAST's `BOS "Task: ..., State: ...;\n"` (the node appends the action tail), pi0's or
    pi0.5's (`flow_prompt`)."""
    mm = tm.mm
    spec = mm.policy_spec
    assert spec is not None
    state = checked_state(spec, body.state)
    if mm.flow is not None:
        _check_flow_body(body)
        text = flow_prompt_text(mm.flow, body.instruction, state)
        beside = None if mm.flow.state_in_prompt else state
    else:
        assert mm.fast is not None and mm.fast_prompt is not None
        text = mm.fast_prompt.task_text(body.instruction, mm.fast.state_bins(state))
        beside = None
    ids = await tm.text_encoder.encode(text, "instruction")
    check_prompt_tokens(ids, spec.tokenizer_max_length, "instruction")
    return ids, beside


def _check_flow_body(body: ActionsBody) -> None:
    """A pi0 / pi0.5 chunk is denoised, not sampled from tokens: token options do not apply."""
    for name in ("relaxed_decoding", "return_token_ids", "temperature"):
        if getattr(body, name):
            raise RequestError(
                "a pi0 / pi0.5 chunk is denoised from noise (set by seed), not sampled from tokens",
                name,
            )


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
