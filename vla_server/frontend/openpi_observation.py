"""openpi observation dicts -> action query bodies, and the policy endpoint's settings.

An observation is the dict an openpi client sends (`WebsocketClientPolicy.infer(obs)`). Keys read:

* `prompt` (str, required): the instruction;
* the camera images: uint8 `[H, W, 3]` or `[3, H, W]` arrays (float arrays in [0, 1] are scaled
  to uint8, as openpi's own policies do). Which keys are images is set by
  `--openpi-image-keys`; by default every array of two or more dimensions under a key whose
  path contains "image" (`observation/image`, `observation/wrist_image`,
  `observation/exterior_image_1_left`, `images/cam_high`, ...), in the observation's order.
  Nested dicts are addressed with "/": `{"images": {"cam_high": a}}` is `images/cam_high`;
* optional per request: `unnorm_key` (str), `num_actions` (int, the horizon), `mm_hashes`,
  `seed` (int: a denoised chunk's noise, `model/denoise.initial_noise`), and for a policy with
  a robot interface `relaxed_decoding` (bool);
* real-time chunking, as on `/v1/actions` (`guidance_request.py`): `prev_chunk` (an
  `[n, action_dim]` array, raw), `inference_delay` (int), `execution_horizon` (int), `rtc` (a
  map: `schedule`, `max_guidance_weight`, `jacobian`).

For a policy with named cameras and a state (its family's `RobotIO`) the images are matched to
the policy's cameras by name when the observation's keys end in them (`observation/base_0_rgb`,
`images/base_0_rgb`, `observation.images.base_0_rgb`; cameras it lacks are left out, as LeRobot
masks them), else taken in order as above; and the robot state is read: the values under
`--openpi-state-keys`, concatenated, or by default the first of `state`, `observation/state`,
`observation.state`.
For other checkpoints everything else (`state`, `observation/joint_position`, ...) is accepted
and ignored: LLaVA-style VLAs condition on images and text only.

Settings, flags of `vla-server serve`:

* `--openpi-image-keys`: comma-separated image keys in camera order (default: auto, as above);
* `--openpi-action-horizon`: actions per reply when the observation gives no `num_actions`
  (default: the policy's own, one step or its whole chunk);
* `--openpi-unnorm-key`: the statistics key when the observation gives no `unnorm_key`
  (default none: fine for a checkpoint with a single key).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_server.config import FrontendConfig
from vla_server.errors import RequestError
from vla_server.frontend.action_request import ActionsBody
from vla_server.frontend.guidance_request import rtc_options
from vla_server.policies.base import RobotIO

DEFAULT_STATE_KEYS = ("state", "observation/state", "observation.state")


@dataclass(frozen=True)
class OpenpiConfig:
    image_keys: tuple[str, ...] = ()  # empty: auto-detect
    action_horizon: int | None = None  # None: 1, or a pi-family policy's chunk
    unnorm_key: str | None = None
    state_keys: tuple[str, ...] = ()  # empty: DEFAULT_STATE_KEYS

    @classmethod
    def from_config(cls, config: FrontendConfig) -> OpenpiConfig:
        horizon = config.openpi_action_horizon
        if horizon is not None and horizon < 1:
            raise ValueError(f"--openpi-action-horizon must be >= 1, not {horizon}")
        keys = tuple(k.strip() for k in config.openpi_image_keys if k.strip())
        states = tuple(k.strip() for k in config.openpi_state_keys if k.strip())
        return cls(keys, horizon, config.openpi_unnorm_key, states)


def _flatten(obs: Mapping[Any, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in obs.items():
        name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        path = f"{prefix}/{name}" if prefix else name
        if isinstance(value, Mapping):
            yield from _flatten(value, path)
        else:
            yield path, value


def _is_auto_image(path: str, value: Any) -> bool:
    return (
        "image" in path.lower()
        and isinstance(value, np.ndarray)
        and value.ndim >= 2
        and value.dtype.kind in "uif"
    )


def to_rgb_uint8(value: Any, key: str) -> np.ndarray:
    """One camera image as contiguous uint8 `[H, W, C]` (C-last), or a RequestError naming `key`."""
    if not isinstance(value, np.ndarray):
        raise RequestError(f"must be a numpy image array, not {type(value).__name__}", key)
    image = value
    if image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3, 4):
        image = image.transpose(1, 2, 0)  # CHW, as openpi's ALOHA clients send
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[-1] not in (1, 3, 4)):
        raise RequestError(f"image shape {list(value.shape)} is not [H,W,3] or [3,H,W]", key)
    if image.dtype.kind == "f":
        if not np.isfinite(image).all():
            raise RequestError("float image has non-finite values", key)
        image = np.rint(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)
    elif image.dtype != np.uint8:
        raise RequestError(f"image dtype {value.dtype} is not uint8 (or float in [0, 1])", key)
    return np.ascontiguousarray(image)


def _images(flat: dict[str, Any], cfg: OpenpiConfig) -> list[np.ndarray]:
    if cfg.image_keys:
        missing = [k for k in cfg.image_keys if k not in flat]
        if missing:
            raise RequestError(f"the observation has no image under {missing[0]!r}", missing[0])
        return [to_rgb_uint8(flat[k], k) for k in cfg.image_keys]
    images = [to_rgb_uint8(v, k) for k, v in flat.items() if _is_auto_image(k, v)]
    if not images:
        raise RequestError(
            "no camera image found (an array under a key containing 'image'; "
            "or start the server with --openpi-image-keys)",
            "observation",
        )
    return images


def _optional(obs: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = obs.get(key, default)
    if value is default:
        return value
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise RequestError(f"must be a {kind.__name__}", key)
    return value


def observation_body(obs: Any, cfg: OpenpiConfig, policy: RobotIO | None = None) -> ActionsBody:
    """The action query an observation asks for (greedy, as openpi's policies act)."""
    if not isinstance(obs, Mapping):
        raise RequestError("the observation must be a msgpack map", "observation")
    prompt = obs.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise RequestError("the observation needs a non-empty string 'prompt'", "prompt")
    flat = dict(_flatten(obs))
    body = ActionsBody(
        instruction=prompt,
        image_data=_images(flat, cfg) if policy is None else _camera_images(flat, cfg, policy),
        unnorm_key=_optional(obs, "unnorm_key", str, cfg.unnorm_key),
        num_actions=_optional(obs, "num_actions", int, cfg.action_horizon),
        mm_hashes=obs.get("mm_hashes"),
        seed=_optional(obs, "seed", int, None),
        prev_chunk=obs.get("prev_chunk"),
        inference_delay=_optional(obs, "inference_delay", int, None),
        execution_horizon=_optional(obs, "execution_horizon", int, None),
        rtc=None if obs.get("rtc") is None else rtc_options(obs["rtc"]),
    )
    if policy is not None:
        body.state = _state(flat, cfg, policy)
        body.relaxed_decoding = _optional(obs, "relaxed_decoding", bool, False)
    return body


def _camera_images(
    flat: dict[str, Any], cfg: OpenpiConfig, policy: RobotIO
) -> dict[str, np.ndarray] | list[np.ndarray]:
    """The policy's cameras by name when the observation's keys end in them, else in
    order; none for a policy without cameras."""
    if not policy.cameras:
        return []
    cameras = set(policy.cameras)
    named = {}
    for key, value in flat.items():
        name = key.replace(".", "/").rsplit("/", 1)[-1]
        if name in cameras and isinstance(value, np.ndarray):
            named[name] = to_rgb_uint8(value, key)
    return named or _images(flat, cfg)


def _state(flat: dict[str, Any], cfg: OpenpiConfig, policy: RobotIO) -> Any:
    if not policy.state_dim:
        return None
    keys = cfg.state_keys or next(([k] for k in DEFAULT_STATE_KEYS if k in flat), [])
    missing = [k for k in keys if k not in flat] or ([] if keys else ["state"])
    if missing:
        raise RequestError(f"the observation has no robot state under {missing[0]!r}", missing[0])
    try:
        values = np.concatenate([np.asarray(flat[k], dtype=np.float64).reshape(-1) for k in keys])
    except (TypeError, ValueError):
        raise RequestError("the robot state must be numbers", keys[0]) from None
    return values.tolist()
