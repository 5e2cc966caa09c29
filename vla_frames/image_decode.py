"""Turn encoded bytes (PNG/JPEG) or a raw pixel array into RGB uint8 ``[H, W, 3]``.

Conversion rules (identical for every input form, so the same picture always yields the same
pixels and therefore the same hash):

* grey (``L``, ``[H, W]``, ``[H, W, 1]``): the value is repeated into R, G and B;
* with alpha (``RGBA``, ``LA``, palette transparency, ``[H, W, 4]``): composited onto white
  with PIL's ``alpha_composite``, as ``transformers``' ``convert_to_rgb`` does for PIL images;
* anything else PIL can read (palette, CMYK, 16-bit grey): PIL's ``convert("RGB")``;
* an EXIF orientation tag (2..8) is applied, as ``transformers.image_utils.load_image`` does.

The returned array may be read-only (a view of PIL's buffer); copy it before writing into it.
A decoded image can also stay a PIL image (``RgbFrame``): preprocessing then resizes it as it is,
without the round trip through an array, and only the server's own hash needs the array.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vla_frames.image_errors import ImageInputError
from vla_frames.image_header import read_declared_size

# RGB uint8 pixels: an [H, W, 3] array, or a loaded PIL image in mode "RGB".
RgbFrame = np.ndarray | Image.Image
_EXIF_ORIENTATION = 0x0112
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error)


def check_pixel_count(width: int, height: int, max_pixels: int, source: str) -> None:
    if width * height > max_pixels:
        raise ImageInputError(
            f"{source} {width}x{height} = {width * height} pixels, "
            f"over the limit of {max_pixels} (--max-image-pixels)"
        )


def decode_encoded_image(data: bytes, max_pixels: int) -> np.ndarray:
    """Decode PNG/JPEG bytes; the declared size is checked against ``max_pixels`` first."""
    return np.asarray(decode_encoded_rgb(data, max_pixels))


def decode_encoded_rgb(data: bytes, max_pixels: int) -> Image.Image:
    """``decode_encoded_image`` as a loaded RGB PIL image."""
    declared = read_declared_size(data)
    check_pixel_count(declared.width, declared.height, max_pixels, "image header claims")
    try:
        with Image.open(io.BytesIO(data), formats=[declared.format]) as image:
            # PIL may read a different frame size than our header scan (e.g. a second SOF).
            check_pixel_count(*image.size, max_pixels, "image header claims")
            image.load()
            return rgb_image(_apply_exif_orientation(image))
    except ImageInputError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageInputError(f"decompression bomb rejected ({exc})") from None
    except UnidentifiedImageError:
        # PIL's message names the BytesIO object, which tells the client nothing.
        raise ImageInputError(f"truncated or corrupt {declared.format} (unreadable)") from None
    except _DECODE_ERRORS as exc:
        raise ImageInputError(f"truncated or corrupt {declared.format} ({exc})") from None


def pil_to_rgb(image: Image.Image) -> np.ndarray:
    return np.asarray(rgb_image(image))


def rgb_image(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    if "A" in image.getbands() or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def as_pixels(frame: RgbFrame) -> np.ndarray:
    """The frame as uint8 ``[H, W, 3]`` (a copy out of PIL's buffer for a PIL image)."""
    return np.asarray(frame) if isinstance(frame, Image.Image) else frame


def as_pil(frame: RgbFrame) -> Image.Image:
    return frame if isinstance(frame, Image.Image) else Image.fromarray(frame)


def frame_hw(frame: RgbFrame) -> tuple[int, int]:
    if isinstance(frame, Image.Image):
        return frame.height, frame.width
    return frame.shape[0], frame.shape[1]


def array_to_rgb(pixels: np.ndarray) -> np.ndarray:
    """Raw pixels: uint8 ``[H, W]``, ``[H, W, 1]``, ``[H, W, 3]`` (RGB) or ``[H, W, 4]`` (RGBA)."""
    if pixels.dtype != np.uint8:
        raise ImageInputError(f"unsupported pixel dtype {pixels.dtype} (only uint8)")
    shape = list(pixels.shape)
    if pixels.ndim not in (2, 3) or (pixels.ndim == 3 and shape[2] not in (1, 3, 4)):
        raise ImageInputError(f"unsupported pixel shape {shape} (expected [H,W], [H,W,1|3|4])")
    if 0 in shape:
        raise ImageInputError(f"empty image (shape {shape})")
    if pixels.ndim == 2 or shape[2] == 1:
        grey = pixels.reshape(shape[0], shape[1], 1)
        return np.ascontiguousarray(np.repeat(grey, 3, axis=2))
    if shape[2] == 4:
        return pil_to_rgb(Image.fromarray(np.ascontiguousarray(pixels)))
    return np.ascontiguousarray(pixels)


def _apply_exif_orientation(image: Image.Image) -> Image.Image:
    orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
    if orientation in range(2, 9):
        return ImageOps.exif_transpose(image)
    return image
