"""An action query's cameras and state for a pi0-FAST checkpoint (`/v1/actions`, openpi).

* Cameras: `image_data` as a list, one image per camera in the policy's `input_features`
  order, or a map keyed by camera name (`base_0_rgb` or `observation.images.base_0_rgb`) that
  may leave cameras out: LeRobot feeds a missing camera as a masked image, which no token
  attends to and which advances no position, exactly as if it were not there. (A map with a
  `data` key is one raw-pixel image, as everywhere else.)
* State: raw robot state, one float per dim of `observation.state`; normalised with the
  checkpoint's statistics and discretised into the prompt (`FastActionTokenizer.state_bins`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vla_server.errors import RequestError
from vla_server.model.lerobot_config import IMAGE_PREFIX
from vla_server.multimodal.fast_actions import FastActionTokenizer


def camera_images(fast: FastActionTokenizer, image_data: Any) -> list[Any]:
    """The query's images in the policy's camera order (absent cameras left out)."""
    cameras = fast.spec.cameras
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
    if len(images) != len(cameras):
        raise RequestError(
            f"{len(images)} images for the policy's {len(cameras)} cameras "
            f"({', '.join(cameras)}): give one per camera in this order, or a map keyed by "
            "camera name",
            "image_data",
        )
    return images


def state_bins(fast: FastActionTokenizer, state: Any) -> list[int]:
    """The discretised state of the prompt; raises a RequestError naming `state`."""
    dim = fast.spec.state_dim
    if state is None or (isinstance(state, list) and not state and not dim):
        if dim:
            raise RequestError(f"this policy needs the robot state ({dim} floats)", "state")
        return []
    if not isinstance(state, list) or not all(_is_number(v) for v in state):
        raise RequestError("must be a list of finite numbers", "state")
    if len(state) != dim:
        raise RequestError(f"has {len(state)} values; the policy's state has {dim}", "state")
    return fast.state_bins([float(v) for v in state])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
