"""The real-time chunking (RTC) fields of an action request, from the body to the wire.

`/v1/actions`, `/generate` (and `Engine.generate`) and the openpi WebSocket's observation take
the same fields, by the same names all the way to the wire's `io_struct.Guidance`:

* `prev_chunk`: [n, action_dim] the not-yet-executed tail of the robot's previous chunk, as the
  robot has it (raw units, unnormalised; narrower rows are zero-padded, as LeRobot pads);
* `inference_delay`: d, the actions the robot executes from it before the new chunk can start
  (required with `prev_chunk`; at most its length and `execution_horizon`);
* `execution_horizon`: LeRobot's meaning and name: where the soft prefix weights reach 0 (the
  paper's H - s, not its s); default 10 (LeRobot's `RTCConfig`), clamped to n;
* `rtc`: {`schedule`: zeros | ones | linear (default) | exp, `max_guidance_weight` (10),
  `jacobian`: identity (default, LeRobot's code) | vjp (the paper's)}.

Without `prev_chunk` the other fields are checked and change nothing: a robot's first chunk
has nothing to continue (LeRobot's `prev_chunk_left_over=None`). `guidance_ask` checks what
needs no model (RequestError naming the field, before any request state exists) into the
`GuidanceAsk` a `GenerateItem` carries; `wire_guidance` has the family's front end normalise
`prev_chunk` (`policies.base.GuidedFrontend`) when the request is tokenized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from vla_server.errors import RequestError, from_msgspec
from vla_server.io_struct import Guidance, RtcOptions, Tensor
from vla_server.policies.base import GuidedFrontend, PolicyFrontend

DEFAULT_EXECUTION_HORIZON = 10  # LeRobot's RTCConfig.execution_horizon


@dataclass(frozen=True)
class GuidanceAsk:
    """A request's checked RTC fields, defaults filled in."""

    prev_chunk: np.ndarray  # float64 [n, k], finite, read-only
    inference_delay: int
    execution_horizon: int
    rtc: RtcOptions


def rtc_options(value: Any, field: str = "rtc") -> RtcOptions:
    """`rtc` as given (None, a map, or already RtcOptions), checked."""
    if value is None:
        return RtcOptions()
    if not isinstance(value, RtcOptions):
        try:
            value = msgspec.convert(value, RtcOptions)
        except msgspec.ValidationError as e:
            raise from_msgspec(e, prefix=field) from None
    weight = value.max_guidance_weight
    if not (math.isfinite(weight) and weight > 0):
        raise RequestError("must be a finite number > 0", f"{field}.max_guidance_weight")
    return value


def _count(value: Any, field: str, least: int) -> int | None:
    if isinstance(value, np.integer):
        value = int(value)
    if value is not None and (type(value) is not int or value < least):
        raise RequestError(f"must be an integer >= {least}", field)
    return value


def _chunk(value: Any, field: str) -> np.ndarray:
    try:
        chunk = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        chunk = None
    if chunk is None or chunk.ndim != 2 or 0 in chunk.shape:
        raise RequestError("must be a non-empty [actions, action_dim] array of numbers", field)
    if not np.isfinite(chunk).all():
        raise RequestError("must be finite", field)
    chunk.flags.writeable = False
    return chunk


def guidance_ask(
    prev_chunk: Any,
    inference_delay: Any = None,
    execution_horizon: Any = None,
    rtc: Any = None,
    suffix: str = "",
) -> GuidanceAsk | None:
    """The checked fields (errors name the field + `suffix`, e.g. "[2]" in a batch); None
    without `prev_chunk`."""
    delay = _count(inference_delay, "inference_delay" + suffix, 0)
    horizon = _count(execution_horizon, "execution_horizon" + suffix, 1)
    options = rtc_options(rtc, "rtc" + suffix)
    if prev_chunk is None:
        return None
    chunk = _chunk(prev_chunk, "prev_chunk" + suffix)
    horizon = DEFAULT_EXECUTION_HORIZON if horizon is None else horizon
    if delay is None:
        raise RequestError(
            "is required with prev_chunk: the actions the robot executes from it while this "
            "chunk is computed",
            "inference_delay" + suffix,
        )
    if delay > horizon:
        raise RequestError(
            f"{delay} is beyond execution_horizon {horizon} (where the guided region ends)",
            "inference_delay" + suffix,
        )
    if delay > len(chunk):
        raise RequestError(
            f"{delay} is beyond prev_chunk's {len(chunk)} actions", "inference_delay" + suffix
        )
    return GuidanceAsk(chunk, delay, horizon, options)


def wire_guidance(
    ask: GuidanceAsk | None, policy: PolicyFrontend, num_actions: int | None
) -> Guidance | None:
    """The wire's guidance of a request: `prev_chunk` in the head's normalised space."""
    if ask is None:
        return None
    if not num_actions:
        raise RequestError("guides a denoised action chunk: it needs num_actions", "prev_chunk")
    if not isinstance(policy, GuidedFrontend):
        raise RequestError(
            "this model's actions are not a denoised chunk: it takes no prev_chunk", "prev_chunk"
        )
    target = np.asarray(policy.prev_chunk_target(ask.prev_chunk), dtype=np.float32)
    return Guidance(Tensor.from_numpy(target), ask.inference_delay, ask.execution_horizon, ask.rtc)
