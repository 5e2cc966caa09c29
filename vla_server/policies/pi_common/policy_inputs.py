"""A pi-family action query's cameras, state and task (`/v1/actions`, openpi, `/generate`).

* Cameras: `image_data` as a list, one image per camera in the policy's `input_features`
  order, or a map keyed by camera name (`base_0_rgb` or `observation.images.base_0_rgb`) that
  may leave cameras out: LeRobot feeds a missing camera as a masked image, which no token
  attends to and which advances no position, exactly as if it were not there. (A map with a
  `data` key is one raw-pixel image, as everywhere else.) A policy whose family allows it
  (`allow_fewer`) also takes a shorter list: the cameras after it are missing.
* State: raw robot state, one float per dim of `observation.state`; the policy normalises it
  with the checkpoint's statistics (pi0-FAST and pi0.5 discretise it into the prompt, pi0
  feeds it to its state token).
* Task: cleaned as openpi cleans it (`strip()`, "_" and "\\n" to spaces); a prompt longer than
  the policy's `tokenizer_max_length` is refused (LeRobot would cut its end off silently).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.policies.pi_common.lerobot_config import IMAGE_PREFIX, LeRobotPolicySpec


def camera_images(spec: LeRobotPolicySpec, image_data: Any, allow_fewer: bool) -> list[Any]:
    """The query's images in the policy's camera order (absent cameras left out)."""
    cameras = spec.cameras
    if isinstance(image_data, Mapping) and "data" not in image_data:
        by_name = {}
        for key, image in image_data.items():
            name = str(key).removeprefix(IMAGE_PREFIX)
            if name not in cameras:
                raise RequestError(
                    f"{key!r} is not a camera of this policy ({', '.join(cameras)})", "image_data"
                )
            by_name[name] = image
        images = [by_name[c] for c in cameras if by_name.get(c) is not None]
        if not images:
            raise RequestError("an action query needs at least one image", "image_data")
        return images
    given = image_data if isinstance(image_data, list) else [image_data]
    images = [im for im in given if im is not None]
    fewer_ok = allow_fewer and 1 <= len(images) < len(cameras)
    if len(images) != len(cameras) and not fewer_ok:
        raise RequestError(
            f"{len(images)} images for the policy's {len(cameras)} cameras "
            f"({', '.join(cameras)}): give one per camera in this order, or a map keyed by "
            "camera name",
            "image_data",
        )
    return images


def checked_state(spec: LeRobotPolicySpec, state: Any) -> list[float]:
    """The raw state as floats, one per state dim ([] for a policy without state); raises a
    RequestError naming `state`."""
    dim = spec.state_dim
    if state is None or (isinstance(state, list) and not state and not dim):
        if dim:
            raise RequestError(f"this policy needs the robot state ({dim} floats)", "state")
        return []
    if not isinstance(state, list) or not all(_is_number(v) for v in state):
        raise RequestError("must be a list of finite numbers", "state")
    if len(state) != dim:
        raise RequestError(f"has {len(state)} values; the policy's state has {dim}", "state")
    return [float(v) for v in state]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


STATE_BINS = np.linspace(-1.0, 1.0, 256 + 1)[:-1]


def discretize_state(normalized: np.ndarray) -> list[int]:
    """openpi's 256 state bins over [-1, 1], not clipped: below range -1, above 255."""
    return (np.digitize(normalized, STATE_BINS) - 1).tolist()


def clean_task(instruction: str) -> str:
    return instruction.strip().replace("_", " ").replace("\n", " ")


def check_prompt_tokens(ids: list[int], max_tokens: int, field: str) -> None:
    if len(ids) > max_tokens:
        raise RequestError(
            f"the prompt has {len(ids)} tokens; the policy's tokenizer_max_length is {max_tokens}",
            field,
        )
