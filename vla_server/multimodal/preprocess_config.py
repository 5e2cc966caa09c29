"""The image preprocessing settings of a checkpoint, read from its processor config files.

Supported: ``SiglipImageProcessor`` (fixed ``size`` {height, width}) and ``CLIPImageProcessor``
(``size`` {shortest_edge} then ``crop_size``), including their ``Fast``/``Pil`` class names.
Keys missing from the file take the defaults of the ``transformers`` class; an int ``size`` means
``shortest_edge`` (both classes have ``default_to_square=False``), an int ``crop_size`` a square.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import xxhash

# Mean/std constants of transformers.image_utils.
_IMAGENET_STANDARD = (0.5, 0.5, 0.5)
_OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_BICUBIC = 3

_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "SiglipImageProcessor": {
        "size": {"height": 224, "width": 224},
        "do_center_crop": False,
        "image_mean": _IMAGENET_STANDARD,
        "image_std": _IMAGENET_STANDARD,
    },
    "CLIPImageProcessor": {
        "size": {"shortest_edge": 224},
        "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224},
        "image_mean": _OPENAI_CLIP_MEAN,
        "image_std": _OPENAI_CLIP_STD,
    },
}
_COMMON_DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "resample": _BICUBIC,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
}


@dataclass(frozen=True)
class PreprocessConfig:
    """Everything that changes ``pixel_values`` for given RGB pixels (and nothing else)."""

    do_resize: bool
    resize_hw: tuple[int, int] | None  # fixed (height, width) resize
    shortest_edge: int | None  # or: scale so the short side has this length
    resample: int  # a PIL.Image.Resampling value
    crop_hw: tuple[int, int] | None  # center crop (height, width), None: no crop
    rescale_factor: float | None  # None: no rescale
    image_mean: tuple[float, float, float] | None  # None: no normalisation
    image_std: tuple[float, float, float] | None
    # Which of transformers' backends the resize and normalisation follow (see `resize`).
    resize_backend: str = "pil"

    def digest(self) -> bytes:
        """16 bytes that change whenever any setting changes."""
        return settings_digest(self)

    @classmethod
    def from_folder(cls, folder: str | Path) -> PreprocessConfig:
        """From ``preprocessor_config.json`` or ``processor_config.json["image_processor"]``."""
        return cls.from_dict(read_image_processor_dict(Path(folder)))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PreprocessConfig:
        processor = _processor_family(raw.get("image_processor_type"))
        cfg = {**_COMMON_DEFAULTS, **_CLASS_DEFAULTS[processor], **raw}
        resize_hw, shortest_edge = _parse_size(cfg["size"])
        do_crop = bool(cfg.get("do_center_crop"))
        do_normalize = bool(cfg["do_normalize"])
        return cls(
            do_resize=bool(cfg["do_resize"]),
            resize_hw=resize_hw,
            shortest_edge=shortest_edge,
            resample=_parse_resample(cfg["resample"]),
            crop_hw=_parse_crop(cfg.get("crop_size")) if do_crop else None,
            rescale_factor=float(cfg["rescale_factor"]) if cfg["do_rescale"] else None,
            image_mean=_triple(cfg["image_mean"], "image_mean") if do_normalize else None,
            image_std=_triple(cfg["image_std"], "image_std") if do_normalize else None,
        )


def settings_digest(settings: Any, prefix: bytes = b"") -> bytes:
    """16 bytes that change whenever any of a settings dataclass's fields change (xxh3-128 of its
    canonical JSON). A ``pil`` backend is left out, so the hashes of PIL-resized frames stay those
    that clients already hold."""
    fields = asdict(settings)
    if fields.get("resize_backend") == "pil":
        del fields["resize_backend"]
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_128_digest(prefix + canonical.encode())


def read_image_processor_dict(folder: Path) -> dict[str, Any]:
    legacy = folder / "preprocessor_config.json"
    if legacy.is_file():
        return json.loads(legacy.read_text())
    combined = folder / "processor_config.json"
    if combined.is_file():
        nested = json.loads(combined.read_text()).get("image_processor")
        if isinstance(nested, dict):
            return nested
    raise FileNotFoundError(
        f"{folder}: no preprocessor_config.json or processor_config.json with an image_processor"
    )


def _processor_family(name: Any) -> str:
    base = str(name)
    for suffix in ("Fast", "Pil"):
        base = base.removesuffix(suffix)
    if base not in _CLASS_DEFAULTS:
        raise ValueError(
            f"unsupported image_processor_type {name!r} (supported: {sorted(_CLASS_DEFAULTS)})"
        )
    return base


def _parse_size(size: Any) -> tuple[tuple[int, int] | None, int | None]:
    if isinstance(size, int):
        return None, size
    if isinstance(size, dict) and set(size) == {"height", "width"}:
        return (int(size["height"]), int(size["width"])), None
    if isinstance(size, dict) and set(size) == {"shortest_edge"}:
        return None, int(size["shortest_edge"])
    raise ValueError(f"unsupported image processor size {size!r}")


def _parse_crop(crop: Any) -> tuple[int, int]:
    if isinstance(crop, int):
        return crop, crop
    if isinstance(crop, dict) and set(crop) == {"height", "width"}:
        return int(crop["height"]), int(crop["width"])
    raise ValueError(f"unsupported image processor crop_size {crop!r}")


def _parse_resample(resample: Any) -> int:
    if isinstance(resample, int) and 0 <= resample <= 5:
        return resample
    raise ValueError(f"unsupported image processor resample {resample!r} (PIL filter id 0..5)")


def _triple(values: Any, name: str) -> tuple[float, float, float]:
    if isinstance(values, int | float):
        values = [values] * 3
    if len(values) != 3:
        raise ValueError(f"image processor {name} needs 3 values, got {values!r}")
    return (float(values[0]), float(values[1]), float(values[2]))
