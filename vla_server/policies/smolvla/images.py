"""SmolVLA's image preprocessing (LeRobot `SmolVLAPolicy.prepare_images`).

* Input: float [0, 1] `[B, 3, H, W]` per camera (uint8 is divided by 255 first, as LeRobot's
  `prepare_observation_for_inference` does).
* `resize_with_pad`: unless already the target size, scale by `ratio = max(w / W, h / H)` to
  `int(h / ratio) x int(w / ratio)` (bilinear, align_corners False, no antialias), then pad
  with 0 on the **left and top** (openpi centres; SmolVLA does not).
* Then `x * 2 - 1` (SmolVLM's mean = std = 0.5).
* Cameras: the configured ones present in the observation, in config order; then, for as many
  of the missing ones as `empty_cameras` allows, an all -1 image with its mask False. With
  `empty_cameras` 0 a missing camera is simply left out of the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F


def to_unit_float(image: torch.Tensor) -> torch.Tensor:
    if image.dtype == torch.uint8:
        return image.to(torch.float32) / 255.0
    return image.to(torch.float32)


def resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, C, h, w] -> [B, C, height, width], aspect kept, padded with 0 at the left and top."""
    h, w = images.shape[-2:]
    if (h, w) == (height, width):
        return images
    ratio = max(w / width, h / height)
    size = (int(h / ratio), int(w / ratio))
    resized = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
    return F.pad(resized, (max(0, width - size[1]), 0, max(0, height - size[0]), 0), value=0.0)


def prepare_images(
    images: Mapping[str, torch.Tensor],
    camera_keys: Sequence[str],
    empty_cameras: int,
    size: tuple[int, int] | None,
    masks: Mapping[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-camera `[B, 3, h, w]` images -> (`[B, slots, 3, H, W]` in [-1, 1], `[B, slots]`
    bool masks). `size`: (width, height) to resize to, or None. `masks`: optional per-camera
    `[B]` validity (LeRobot's `<key>_padding_mask`)."""
    present = [k for k in camera_keys if k in images]
    if not present:
        raise ValueError(f"no configured camera in the observation (configured: {camera_keys})")
    slots, valid = [], []
    for key in present:
        image = to_unit_float(images[key])
        if size is not None:
            image = resize_with_pad(image, size[1], size[0])
        slots.append(image * 2.0 - 1.0)
        mask = None if masks is None else masks.get(key)
        ones = torch.ones(image.shape[0], dtype=torch.bool, device=image.device)
        valid.append(ones if mask is None else mask.to(torch.bool))
    missing = len(camera_keys) - len(present)
    for _ in range(min(missing, empty_cameras)):
        slots.append(torch.full_like(slots[-1], -1.0))
        valid.append(torch.zeros_like(valid[-1]))
    return torch.stack(slots, dim=1), torch.stack(valid, dim=1)
