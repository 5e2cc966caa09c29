"""RGB uint8 pixels -> the stacked ``pixel_values [3 * towers, H, W]`` of Prismatic's processor.

OpenVLA's ``PrismaticImageProcessor`` runs torchvision's functional transforms on a PIL image;
for PIL input they come down to PIL and float32 arithmetic, reproduced here without torchvision:

* ``letterbox`` (``tvf_do_letterbox``): pad to a square with ``tvf_letterbox_fill``, the padding
  ``int((max(w, h) - side) / 2)`` on both ends of the short side;
* per tower: PIL resize (``tvf_resize_params``: ``size`` [h, w], or an int for the short side),
  center crop (torchvision's: rounded offsets, zero padding when the crop is larger), ``/ 255``
  in float32, then ``(x - mean) / std`` with that tower's own mean/std (as a per-channel table
  lookup built from that arithmetic, ``value_tables``: the same float32 values, one pass);
* the towers' results stacked along the channels (DINOv2's, then SigLIP's, for OpenVLA).

The saved ``tvf_*`` keys win over ``input_sizes``/``means``/``stds``, as they do when
``from_pretrained`` sets them after ``__init__``. OpenVLA's DINOv2 mean/std in the file are
bf16-rounded: the file's values are used, never timm's defaults.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from vla_frames.image_decode import RgbFrame, as_pil, frame_hw
from vla_server.multimodal.preprocess import short_side_hw
from vla_server.multimodal.preprocess_config import settings_digest
from vla_server.multimodal.resize import resize_rgb
from vla_server.multimodal.value_tables import look_up, value_tables

PRISMATIC_PROCESSOR = "PrismaticImageProcessor"
_RESAMPLE = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
_STRATEGIES = ("resize-naive", "letterbox", "resize-crop")


@dataclass(frozen=True)
class TowerTransform:
    size: tuple[int, int] | int  # (height, width), or the short side's length
    resample: int  # a PIL.Image.Resampling value
    crop_hw: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


@dataclass(frozen=True)
class PrismaticPreprocess:
    letterbox_fill: tuple[int, int, int] | None  # None: no letterbox padding
    towers: tuple[TowerTransform, ...]
    resize_backend: str = "pil"  # or "torch": see `resize`

    def digest(self) -> bytes:
        return settings_digest(self, b"prismatic:")

    @property
    def reads_arrays(self) -> bool:
        return self.resize_backend == "torch"

    def apply(self, pixels: RgbFrame) -> np.ndarray:
        return prismatic_preprocess(pixels, self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PrismaticPreprocess:
        strategy = raw.get("image_resize_strategy", "letterbox")
        if strategy not in _STRATEGIES:
            raise ValueError(f"image_resize_strategy {strategy!r} is not one of {_STRATEGIES}")
        n = len(raw.get("input_sizes") or raw.get("tvf_resize_params") or [[3, 224, 224]])
        towers = tuple(_tower(raw, i, strategy) for i in range(n))
        letterbox = raw.get("tvf_do_letterbox", strategy == "letterbox")
        fill = raw.get("tvf_letterbox_fill")
        if letterbox and fill is None:
            fill = [int(x * 255) for x in towers[-1].mean]  # the loop leaves the last tower's
        return cls(
            letterbox_fill=tuple(int(v) for v in fill) if letterbox else None,  # type: ignore[arg-type]
            towers=towers,
        )


def _tower(raw: dict[str, Any], i: int, strategy: str) -> TowerTransform:
    side = int(_nth(raw, "input_sizes", i, [3, 224, 224])[-1])
    resize = _nth(raw, "tvf_resize_params", i, None)
    if resize is not None:
        size = resize["size"]
        resample = int(resize.get("interpolation", 3))
    else:
        size = [side, side] if strategy == "resize-naive" else side
        resample = _RESAMPLE[str(_nth(raw, "interpolations", i, "bicubic"))]
    crop = _nth(raw, "tvf_crop_params", i, {"output_size": [side, side]})["output_size"]
    norm = _nth(raw, "tvf_normalize_params", i, None) or {
        "mean": _nth(raw, "means", i, [0.5] * 3),
        "std": _nth(raw, "stds", i, [0.5] * 3),
    }
    return TowerTransform(
        size=(int(size[0]), int(size[1])) if isinstance(size, list | tuple) else int(size),
        resample=resample,
        crop_hw=(int(crop[0]), int(crop[1])) if isinstance(crop, list | tuple) else (crop, crop),
        mean=_triple(norm["mean"], "mean"),
        std=_triple(norm["std"], "std"),
    )


def _nth(raw: dict[str, Any], key: str, i: int, default: Any) -> Any:
    values = raw.get(key)
    if values is None:
        return default
    if i >= len(values):
        raise ValueError(f"preprocessor {key} has {len(values)} entries, needs {i + 1}")
    return values[i]


def _triple(values: Any, name: str) -> tuple[float, float, float]:
    if len(values) != 3:
        raise ValueError(f"Prismatic image processor {name} needs 3 values, got {values!r}")
    return (float(values[0]), float(values[1]), float(values[2]))


def prismatic_preprocess(pixels: RgbFrame, cfg: PrismaticPreprocess) -> np.ndarray:
    """``pixels``: uint8 ``[H, W, 3]`` RGB -> C-contiguous float32 ``[3 * towers, H', W']``."""
    image = pixels
    if cfg.letterbox_fill is not None:
        image = _letterbox(as_pil(pixels), cfg.letterbox_fill)
    # OpenVLA's two towers resize alike: resize once, normalise twice.
    crops: dict[tuple[object, ...], np.ndarray] = {}
    out = np.empty((3 * len(cfg.towers), *cfg.towers[0].crop_hw), dtype=np.float32)
    for i, t in enumerate(cfg.towers):
        key = (t.size, t.resample, t.crop_hw)
        if key not in crops:
            crops[key] = np.moveaxis(_resized_crop(image, t, cfg.resize_backend), -1, 0)
        look_up(crops[key], _tables(t), out[3 * i : 3 * i + 3])
    return out


def tower_normalise(chw: np.ndarray, t: TowerTransform) -> np.ndarray:
    """torchvision's arithmetic on uint8 ``[3, H, W]``: ``/ 255`` then ``(x - mean) / std``, all
    in float32. Run on 0..255 once per tower (``value_tables``)."""
    mean = np.asarray(t.mean, dtype=np.float32)[:, None, None]
    std = np.asarray(t.std, dtype=np.float32)[:, None, None]
    return (chw.astype(np.float32) / np.float32(255) - mean) / std


@functools.cache
def _tables(t: TowerTransform) -> np.ndarray:
    return value_tables(lambda chw: tower_normalise(chw, t))


def _letterbox(image: Image.Image, fill: tuple[int, int, int]) -> Image.Image:
    (w, h), side = image.size, max(image.size)
    pad_w, pad_h = int((side - w) / 2), int((side - h) / 2)
    out = Image.new("RGB", (w + 2 * pad_w, h + 2 * pad_h), fill)
    out.paste(image, (pad_w, pad_h))
    return out


def _resized_crop(image: RgbFrame, t: TowerTransform, backend: str) -> np.ndarray:
    """Resized and center-cropped: uint8 ``[H', W', 3]`` (either backend takes an array or a
    PIL image as it is)."""
    h, w = frame_hw(image)
    out_hw = t.size if isinstance(t.size, tuple) else short_side_hw(h, w, t.size)
    return _center_crop(resize_rgb(image, out_hw, t.resample, backend), t.crop_hw)


def _center_crop(hwc: np.ndarray, crop_hw: tuple[int, int]) -> np.ndarray:
    crop_h, crop_w = crop_hw
    h, w = hwc.shape[:2]
    if crop_h > h or crop_w > w:
        top, left = max(crop_h - h, 0) // 2, max(crop_w - w, 0) // 2
        padded = np.zeros((max(h, crop_h), max(w, crop_w), 3), dtype=hwc.dtype)
        padded[top : top + h, left : left + w] = hwc
        hwc, (h, w) = padded, padded.shape[:2]
    top, left = int(round((h - crop_h) / 2.0)), int(round((w - crop_w) / 2.0))
    return hwc[top : top + crop_h, left : left + crop_w]
