"""SGLang's action request -> the node's one action request (`ActionsBody`).

The payload is what SGLang's `multimodal_gen` reads (`entrypoints/action/protocol.py`,
`_action_request_to_observation` and `_build_action_model_sampling_params`), in either form:

* the envelope `{request_id|id, model, input: {task|prompt, observation: {images, state, noise,
  ...}, images?, state?, noise?}, parameters: {...}, runtime: {...}}`;
* the flat form (no `input`; what its WebSockets send): the payload itself is the observation,
  with `task|prompt`, `images` or `observation.images.<camera>` (or a bare `<camera>`),
  `state|observation.state`, `noise|observation.noise`, and `parameters` / `runtime` beside.

An image is one of SGLang's four encodings: a nested HWC list of ints (or floats), a tensor map
`{dtype, shape, values|data}`, `{b64_json|base64: PNG/JPEG base64 or a data: URL}` (handed to the
node's own decoder with its size limits), or a numpy array (msgpack), HWC or CHW; floats in
[0, 1], or in [0, 255] when their maximum is over 2 (SGLang's rule). State and noise are lists,
tensor maps or arrays. Knobs (`num_inference_steps`, `seed`, `action_horizon`, `action_dim`,
`output_format`) are read from `parameters`, then the observation, as SGLang reads them.

Stricter than SGLang, on purpose: a camera the policy lacks is a 400 naming it (SGLang masks it
silently), a field SGLang has but the node cannot honour (pre-tokenized prompts, image masks,
guidance scales) is a 400 saying so, and a key nobody knows is a 400 naming it. Real-time
chunking's `prev_chunk`, `inference_delay`, `execution_horizon`, `rtc` ride in the observation,
as on the openpi doors. Errors raised later, by the node, are renamed to this payload's paths
(`rename`), so every 400 names the field as the client wrote it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.frontend.action_request import ActionsBody
from vla_server.frontend.field_tables import FieldTable
from vla_server.frontend.guidance_request import rtc_options
from vla_server.frontend.openpi_observation import to_rgb_uint8
from vla_server.frontend.sglang_action_policy import ServedPolicy

CAMERA_PREFIX = "observation.images."
# The request field for SGLang's convention (normalised state in, normalised actions out): in
# `runtime`, or at the top of a flat payload. Without it the node normalises, as everywhere.
CLIENT_NORMALIZED = "client_normalized"


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_OBSERVATION_KEYS = _names(
    "prompt task images state observation.state noise observation.noise seed num_inference_steps "
    "action_horizon action_dim output_format prev_chunk inference_delay execution_horizon rtc "
    "client_normalized"
)
_IGNORED = _names(  # SGLang's cache and CUDA-graph switches: no value changes the chunk
    "enable_prefix_cache enable_pi_prefix_cache enable_cuda_graph enable_pi_cuda_graph "
    "return_timing model request_id id parameters runtime"
)
_UNSUPPORTED = _names(  # SGLang reads these; the node cannot honour them
    "tokens tokenized_prompt token_masks image_masks camera_order image image_path "
    "input_reference video video_path guidance_scale guidance_scale_action"
)
_INPUT_KEYS = _names("task prompt observation images state noise")
PARAMETERS = FieldTable(
    _names("num_inference_steps seed action_horizon action_dim output_format"),
    frozenset(),
    {"guidance_scale": (), "guidance_scale_action": ()},
)
RUNTIME = FieldTable(
    frozenset(["output_format", "response_format", CLIENT_NORMALIZED]),
    frozenset(["return_timing", "prefix_cache", "cuda_graph"]),
    {},
)


@dataclass
class SglangAsk:
    """One SGLang action request, translated: the node's body and how to reply."""

    body: ActionsBody
    request_id: str | None
    output_format: str  # "list" | "numpy"
    response_format: str  # "envelope" | "raw"
    client_normalized: bool
    # The node's field names -> this payload's paths (for errors raised after translation).
    paths: dict[str, str] = field(default_factory=dict)

    def rename(self, e: RequestError) -> RequestError:
        """`e` naming this payload's field (`state` -> `input.observation.state`, ...)."""
        where = e.field or ""
        m = re.fullmatch(r"image_data\[(\d+)\]", where)
        path = self.paths.get(f"image_data[{m.group(1)}]" if m else where.split(".")[0])
        if path is None:
            return e
        message = e.message.removeprefix(f"{where}: ")
        return RequestError(message, path, e.status_code)


def _map(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError("must be a map", path)
    return value


class View(dict[str, tuple[Any, str]]):
    """SGLang's flat observation of a payload: each key with its value and its path."""

    def __init__(self, items: dict[str, tuple[Any, str]], prefix: str):
        super().__init__(items)
        self.prefix = prefix  # where a missing key would have been


def observation_view(payload: Any) -> View:
    payload = _map(payload, "body")
    if "input" not in payload:
        return View({k: (v, k) for k, v in payload.items() if isinstance(k, str)}, "")
    for key in payload:
        if key not in ("input", *_IGNORED):
            raise RequestError(f"unknown field `{key}`", str(key))
    given = _map(payload["input"], "input")
    obs = _map(given.get("observation") or {}, "input.observation")
    view = {k: (v, f"input.observation.{k}") for k, v in obs.items()}
    for key, value in given.items():
        if key not in _INPUT_KEYS:
            raise RequestError(f"unknown field `{key}`", f"input.{key}")
        if key != "observation":
            view[key] = (value, f"input.{key}")
    return View(view, "input.observation.")


def _check_keys(view: View, cameras: tuple[str, ...]) -> None:
    for key, (value, path) in view.items():
        if key in _OBSERVATION_KEYS or key in _IGNORED or key in cameras:
            continue
        if key.startswith(CAMERA_PREFIX):
            if key.removeprefix(CAMERA_PREFIX) in cameras:
                continue
            raise RequestError(f"is not a camera of this policy ({list(cameras)})", path)
        if key in _UNSUPPORTED:
            if value is not None:
                raise RequestError(
                    "is not supported by this server (the node prompts itself)", path
                )
            continue
        raise RequestError(f"unknown field `{key}`", path)


def _number_array(value: Any, path: str) -> np.ndarray:
    """A list, a tensor map `{dtype, shape, values|data}` or an array, as a numeric array."""
    try:
        if isinstance(value, dict):
            data = value.get("values", value.get("data"))
            dtype = np.dtype(value["dtype"]) if value.get("dtype") else None
            if dtype is not None and dtype.kind not in "biuf":  # before it sizes anything
                raise RequestError(f"is not a numeric array (dtype {dtype})", path)
            array = np.asarray(data, dtype=dtype)
            if value.get("shape") is not None:
                array = array.reshape([int(n) for n in value["shape"]])
        else:
            array = np.asarray(value)
    except RequestError:
        raise
    except (TypeError, ValueError, OverflowError):
        raise RequestError("is not a numeric array (or its shape does not fit)", path) from None
    if array.dtype.kind not in "biuf":
        raise RequestError(f"is not a numeric array (dtype {array.dtype})", path)
    return array


def _image(value: Any, path: str) -> Any:
    """One camera image: an encoded one passes to the node's decoder, pixels become uint8 HWC."""
    if isinstance(value, dict) and ("b64_json" in value or "base64" in value):
        data = value.get("b64_json") or value.get("base64")
        if not isinstance(data, str) or not data:
            raise RequestError("needs a base64 string in b64_json", path)
        return data
    pixels = _number_array(value, path)
    if pixels.dtype.kind in "iu" and pixels.dtype != np.uint8:
        if pixels.size and (pixels.min() < 0 or pixels.max() > 255):
            raise RequestError("integer pixels must be in [0, 255]", path)
        pixels = pixels.astype(np.uint8)
    elif pixels.dtype.kind == "f":
        pixels = pixels.astype(np.float32)
        if pixels.size and np.isfinite(pixels).all() and pixels.max() > 2.0:
            pixels = pixels / np.float32(255.0)  # SGLang: a float image over 2 is in [0, 255]
    elif pixels.dtype.kind == "b":
        raise RequestError("is not an image (booleans)", path)
    return to_rgb_uint8(pixels, path)


def _images(view: View, policy: ServedPolicy) -> tuple[dict[str, Any], dict[str, str]]:
    """The cameras' images by name, and each camera's path."""
    found: dict[str, tuple[Any, str]] = {}
    if "images" in view:
        images, where = view["images"]
        for name, image in _map(images, where).items():
            if name not in policy.cameras:
                raise RequestError(
                    f"is not a camera of this policy ({list(policy.cameras)})", f"{where}.{name}"
                )
            found[name] = (image, f"{where}.{name}")
    for name in policy.cameras:
        for key in (name, CAMERA_PREFIX + name):
            if key in view:
                found[name] = view[key]
    images = {name: _image(v, path) for name, (v, path) in found.items() if v is not None}
    return images, {name: path for name, (_, path) in found.items()}


def _first(view: View, *keys: str) -> tuple[Any, str]:
    """The first of `keys` the view has (value, path), else (None, where keys[0] would be)."""
    found = (view[k] for k in keys if k in view and view[k][0] is not None)
    return next(found, (None, view.prefix + keys[0]))


def _state(view: View, policy: ServedPolicy, padded: bool) -> list[float] | None:
    """The state's floats. `padded`: SGLang's convention, a normalised state zero-padded to the
    policy's width when shorter (its server pads so)."""
    value, path = _first(view, "state", "observation.state")
    if value is None:
        return None
    state = _number_array(value, path).astype(np.float64).reshape(-1)
    if padded and state.size < policy.state_dim:
        state = np.concatenate([state, np.zeros(policy.state_dim - state.size)])
    if state.size != policy.state_dim:
        raise RequestError(
            f"has {state.size} values; the policy's state has {policy.state_dim}", path
        )
    if not np.isfinite(state).all():
        raise RequestError("must be finite", path)
    return state.tolist()


def _int(value: Any, path: str) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError("must be an integer", path)
    return value


def _knob(view: View, params: dict[str, Any], name: str) -> tuple[Any, str]:
    """SGLang's precedence for a knob: `parameters`, then the observation."""
    if name in params:
        return params[name], f"parameters.{name}"
    return _first(view, name)


def _tables(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    params = PARAMETERS.implemented_fields(payload.get("parameters") or {}, "parameters")
    runtime = RUNTIME.implemented_fields(payload.get("runtime") or {}, "runtime")
    return params, runtime


def _check_steps(value: Any, path: str, policy: ServedPolicy) -> None:
    if value is not None and _int(value, path) != policy.num_inference_steps:
        raise RequestError(
            f"this checkpoint denoises in {policy.num_inference_steps} steps; {value} is not "
            "supported",
            path,
        )


def _num_actions(view: dict[str, Any], params: dict[str, Any], policy: ServedPolicy) -> int | None:
    horizon, path = _knob(view, params, "action_horizon")
    dim, dim_path = _knob(view, params, "action_dim")
    if dim is not None and _int(dim, dim_path) not in (policy.action_dim, policy.padded_action_dim):
        raise RequestError(
            f"this policy's actions have {policy.action_dim} dims ({policy.padded_action_dim} "
            "padded)",
            dim_path,
        )
    if horizon is None or _int(horizon, path) == policy.action_horizon:
        return None  # the policy's whole chunk
    return horizon


def _choice(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    text = str(value).lower()
    if text not in allowed:
        raise RequestError(f"must be one of {list(allowed)}", path)
    return text


def _task(view: View) -> str:
    task, path = _first(view, "task", "prompt")
    if task is None and view.prefix:
        path = "input.task"
    if not isinstance(task, str) or not task.strip():
        raise RequestError("needs a non-empty string (the task)", path)
    return task


def _rtc(view: View, body: ActionsBody, paths: dict[str, str]) -> None:
    """Real-time chunking's fields, as the openpi doors read them."""
    for name in ("prev_chunk", "inference_delay", "execution_horizon", "rtc"):
        value, path = _first(view, name)
        paths[name] = path
        if value is None:
            continue
        if name == "prev_chunk":
            body.prev_chunk = _number_array(value, path).astype(np.float64).tolist()
        elif name == "rtc":
            body.rtc = rtc_options(value, path)
        else:
            setattr(body, name, _int(value, path))


def _client_normalized(view: View, runtime: dict[str, Any]) -> tuple[bool, str]:
    value, path = runtime.get(CLIENT_NORMALIZED), f"runtime.{CLIENT_NORMALIZED}"
    if value is None:
        value, path = _first(view, CLIENT_NORMALIZED)
    if value is not None and not isinstance(value, bool):
        raise RequestError("must be true or false", path)
    return bool(value), path


def _reply_form(view: View, params: dict, runtime: dict, default: str) -> tuple[str, str]:
    """(output_format, response_format), each read where SGLang reads it."""
    output, path = runtime.get("output_format"), "runtime.output_format"
    if output is None:
        output, path = _knob(view, params, "output_format")
    response = runtime.get("response_format", "envelope")
    return (
        _choice(output or default, path, ("list", "numpy")),
        _choice(response, "runtime.response_format", ("envelope", "raw")),
    )


def _paths(view: View, policy: ServedPolicy, params: dict, cameras: dict[str, str]) -> dict:
    """The node's field names -> this payload's paths, for errors the node raises later."""
    paths = {"state": _first(view, "state", "observation.state")[1]}
    paths["noise"] = _first(view, "noise", "observation.noise")[1]
    paths["seed"] = _knob(view, params, "seed")[1]
    paths["num_actions"] = _knob(view, params, "action_horizon")[1]
    paths["instruction"] = _first(view, "task", "prompt")[1]
    present = [c for c in policy.cameras if c in cameras]
    paths.update({f"image_data[{i}]": cameras[c] for i, c in enumerate(present)})
    paths["image_data"] = view.get("images", (None, "images"))[1]
    return paths


def sglang_ask(payload: Any, policy: ServedPolicy, default_output: str = "list") -> SglangAsk:
    """The node's action request for an SGLang payload; a RequestError names the field.
    `default_output`: the `output_format` when the payload names none (SGLang's msgpack
    replies and WebSockets default to numpy)."""
    view = observation_view(payload)
    _check_keys(view, policy.cameras)
    params, runtime = _tables(payload)
    _check_steps(*_knob(view, params, "num_inference_steps"), policy)
    normalized, norm_path = _client_normalized(view, runtime)
    images, cameras = _images(view, policy)
    noise, noise_path = _first(view, "noise", "observation.noise")
    seed, seed_path = _knob(view, params, "seed")
    body = ActionsBody(
        instruction=_task(view),
        image_data=images,
        state=_state(view, policy, padded=normalized),
        seed=None if seed is None else _int(seed, seed_path),
        noise=None if noise is None else _number_array(noise, noise_path),
        num_actions=_num_actions(view, params, policy),
    )
    if normalized and body.state is not None:
        body.state = policy.raw_state(body.state, norm_path)
    paths = _paths(view, policy, params, {c: cameras[c] for c in images})
    _rtc(view, body, paths)
    request_id = payload.get("request_id") or payload.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise RequestError("must be a string", "request_id")
    output, response = _reply_form(view, params, runtime, default_output)
    return SglangAsk(body, request_id, output, response, normalized, paths)
