"""image_data parsing: every accepted form, and every bad input rejected with a named problem."""

from __future__ import annotations

import base64
import io
import os
import struct
import threading
import warnings
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps
from transformers.image_transforms import convert_to_rgb
from transformers.image_utils import load_image as hf_load_image

from tests.support.images import encode, random_rgb, smooth_rgb
from vla_frames.image_errors import ImageInputError
from vla_server.multimodal.image_input import MediaPolicy, load_image, load_images

POLICY = MediaPolicy()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def raw_dict(pixels: np.ndarray, as_text: bool = True) -> dict:
    data = pixels.tobytes()
    return {"shape": list(pixels.shape), "dtype": "uint8", "data": b64(data) if as_text else data}


def expect_error(item: object, fragment: str, policy: MediaPolicy = POLICY, index: int = 0) -> str:
    with pytest.raises(ImageInputError) as info:
        load_image(item, index, policy)
    message = str(info.value)
    assert message.startswith(f"image_data[{index}]: "), message
    assert fragment in message, message
    return message


# ---- accepted forms -------------------------------------------------------------------------


def test_png_in_every_string_and_bytes_form_gives_the_exact_pixels():
    pixels = random_rgb(13, 21)
    png = encode(pixels, "PNG")
    forms = [png, b64(png), f"data:image/png;base64,{b64(png)}", raw_dict(pixels), pixels]
    for form in forms:
        out = load_image(form, 0, POLICY)
        assert out.dtype == np.uint8 and out.shape == (13, 21, 3)
        np.testing.assert_array_equal(out, pixels)


def test_raw_pixels_as_bytes_and_base64_with_line_breaks():
    pixels = random_rgb(4, 5, seed=1)
    np.testing.assert_array_equal(load_image(raw_dict(pixels, as_text=False), 0, POLICY), pixels)
    wrapped = base64.encodebytes(encode(pixels, "PNG")).decode()  # MIME style, newline every 76
    np.testing.assert_array_equal(load_image(wrapped, 0, POLICY), pixels)


def test_jpeg_decodes_like_pil_and_base64_jpeg_is_not_mistaken_for_a_path():
    pixels = smooth_rgb(48, 64)
    jpeg = encode(pixels, "JPEG", quality=90)
    text = b64(jpeg)
    assert text.startswith("/9j/")
    reference = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))
    np.testing.assert_array_equal(load_image(text, 0, POLICY), reference)
    data_url = f"data:image/jpeg;base64,{text}"
    np.testing.assert_array_equal(load_image(data_url, 0, POLICY), reference)


def test_grey_raw_and_grey_png_match_pil_rgb_conversion():
    grey = np.random.default_rng(2).integers(0, 256, (6, 9), dtype=np.uint8)
    reference = np.asarray(Image.fromarray(grey).convert("RGB"))
    for form in (raw_dict(grey), raw_dict(grey[:, :, None]), encode(grey, "PNG"), grey):
        np.testing.assert_array_equal(load_image(form, 0, POLICY), reference)


def test_rgba_raw_and_rgba_png_composite_onto_white_like_transformers():
    rgba = np.random.default_rng(3).integers(0, 256, (7, 5, 4), dtype=np.uint8)
    reference = convert_to_rgb(Image.fromarray(rgba), return_numpy=True)
    for form in (raw_dict(rgba), encode(rgba, "PNG"), rgba):
        np.testing.assert_array_equal(load_image(form, 0, POLICY), reference)


def test_exif_orientation_is_applied_like_transformers_load_image(tmp_path: Path):
    pixels = random_rgb(6, 10, seed=4)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = tmp_path / "rotated.png"
    Image.fromarray(pixels).save(path, exif=exif)
    reference = np.asarray(hf_load_image(str(path)))
    assert reference.shape == (10, 6, 3)
    np.testing.assert_array_equal(load_image(path.read_bytes(), 0, POLICY), reference)
    np.testing.assert_array_equal(reference, np.asarray(ImageOps.exif_transpose(Image.open(path))))


def test_local_paths_inside_the_allow_list(tmp_path: Path):
    media = tmp_path / "media"
    (media / "sub").mkdir(parents=True)
    pixels = random_rgb(5, 5, seed=5)
    (media / "sub" / "frame.png").write_bytes(encode(pixels, "PNG"))
    os.symlink(media / "sub" / "frame.png", media / "link.png")
    policy = MediaPolicy(allowed_local_media_path=str(media))
    for text in (
        str(media / "sub" / "frame.png"),
        f"file://{media}/sub/frame.png",
        str(media / "sub" / ".." / "sub" / "frame.png"),
        str(media / "link.png"),
    ):
        np.testing.assert_array_equal(load_image(text, 0, policy), pixels)


# ---- bad input ------------------------------------------------------------------------------


def test_empty_inputs():
    expect_error("", "empty image")
    expect_error(b"", "empty image")
    expect_error(raw_dict(np.zeros((0, 4, 3), np.uint8)), "unsupported raw pixel shape")
    expect_error(np.zeros((0, 4, 3), np.uint8), "empty image")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_images_name_the_format(fmt: str):
    data = encode(smooth_rgb(40, 50) if fmt == "JPEG" else random_rgb(40, 50), fmt)
    for cut in (9, 30, len(data) // 3, len(data) // 2, len(data) - 60):
        message = expect_error(data[:cut], "truncated")
        assert fmt in message


def test_corrupt_and_unknown_formats():
    expect_error(b"GIF89a" + b"\0" * 40, "unrecognised image format")
    png = encode(random_rgb(8, 8), "PNG")
    expect_error(png[:12] + b"JUNK" + png[16:], "corrupt PNG")


def test_wrong_base64():
    expect_error("not*base64*at*all", "invalid base64")
    expect_error("iVBORw0KGgo", "invalid base64")  # PNG prefix, bad padding
    expect_error("data:image/png;base64,@@@@", "invalid base64")


def test_data_url_problems():
    payload = b64(encode(random_rgb(4, 4), "PNG"))
    expect_error(f"data:text/plain;base64,{payload}", "is not an image")
    expect_error(f"data:image/png,{payload}", "not base64-encoded")
    expect_error("data:image/png;base64", "malformed data URL")


def _png_header_claiming(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)  # a few bytes of scanlines: the rest "would" follow
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _jpeg_header_claiming(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (_png_header_claiming(100_000, 100_000), "100000x100000"),
        (_jpeg_header_claiming(65_535, 65_535), "65535x65535"),  # JPEG's largest frame
    ],
)
def test_decompression_bomb_header_is_rejected_before_pil_opens_it(monkeypatch, data, size):
    def pil_must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("PIL was asked to open a bomb")

    monkeypatch.setattr(Image, "open", pil_must_not_run)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PIL's DecompressionBombWarning would fail the test
        message = expect_error(b64(data), size)
    assert "over the limit" in message


def test_pixel_limit_below_pil_limit_applies_to_headers_and_raw_shapes():
    policy = MediaPolicy(max_image_pixels=100)
    expect_error(encode(random_rgb(11, 10), "PNG"), "11 = 110 pixels", policy)  # "10x11 = 110"
    expect_error(raw_dict(random_rgb(20, 20)), "over the limit of 100", policy)
    expect_error(random_rgb(20, 20), "over the limit of 100", policy)
    assert load_image(encode(random_rgb(10, 10), "PNG"), 0, policy).shape == (10, 10, 3)
    with pytest.raises(ValueError, match="PIL's limit"):
        MediaPolicy(max_image_pixels=10**12)


def test_byte_limit_is_checked_before_decoding():
    png = encode(random_rgb(32, 32), "PNG")
    policy = MediaPolicy(max_image_bytes=len(png) - 1)
    expect_error(png, "over the limit", policy)
    expect_error(b64(png), "over the limit", policy)
    expect_error(b64(png) * 4, "over the limit", policy)  # not decoded: the bound comes first
    expect_error(raw_dict(random_rgb(64, 64)), "over the limit", MediaPolicy(max_image_bytes=1000))


def test_raw_pixel_problems():
    pixels = random_rgb(4, 6)
    short = raw_dict(pixels) | {"data": b64(pixels.tobytes()[:-3])}
    message = expect_error(short, "byte count mismatch")
    assert "69 bytes" in message and "72" in message
    expect_error(raw_dict(pixels) | {"dtype": "float32"}, "unsupported raw pixel dtype")
    expect_error(raw_dict(pixels) | {"shape": [4, 6, 2]}, "unsupported raw pixel shape")
    expect_error(raw_dict(pixels) | {"shape": [24]}, "unsupported raw pixel shape")
    expect_error(raw_dict(pixels) | {"shape": [4, True, 3]}, "unsupported raw pixel shape")
    expect_error(raw_dict(pixels) | {"data": 12}, "'data' as base64 text or bytes")
    expect_error(pixels.astype(np.float32), "unsupported pixel dtype float32")
    expect_error(np.zeros((4, 6, 5), np.uint8), "unsupported pixel shape")
    expect_error(3.5, "unsupported image_data type float")


def test_local_paths_off_by_default_and_confined_to_the_allow_list(tmp_path: Path):
    media, outside = tmp_path / "media", tmp_path / "secret"
    media.mkdir()
    outside.mkdir()
    (outside / "x.png").write_bytes(encode(random_rgb(4, 4), "PNG"))
    os.symlink(outside / "x.png", media / "escape.png")
    os.symlink(outside, media / "dir_link")
    expect_error(str(outside / "x.png"), "local image paths are disabled")
    policy = MediaPolicy(allowed_local_media_path=str(media))
    for text in (
        str(outside / "x.png"),
        str(media / ".." / "secret" / "x.png"),
        str(media / "escape.png"),
        str(media / "dir_link" / "x.png"),
        f"file://{outside}/x.png",
        "/etc/passwd",
    ):
        expect_error(text, "outside the allowed media directory", policy)
    expect_error(str(media / "missing.png"), "cannot open local image", policy)
    expect_error(str(media), "not a regular file", policy)


def test_remote_urls_off_by_default():
    expect_error("http://127.0.0.1:9/x.png", "remote image URLs are disabled")
    expect_error("https://example.com/x.png", "remote image URLs are disabled")


@pytest.fixture
def image_server() -> Iterator[str]:
    png = encode(random_rgb(9, 7, seed=9), "PNG")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            body = {"/ok.png": png, "/big.png": png * 50}.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_remote_urls_when_enabled(image_server: str):
    policy = MediaPolicy(allow_remote=True, max_image_bytes=5000, remote_timeout_s=5.0)
    np.testing.assert_array_equal(
        load_image(f"{image_server}/ok.png", 0, policy), random_rgb(9, 7, seed=9)
    )
    expect_error(f"{image_server}/missing.png", "HTTP 404", policy)
    expect_error(f"{image_server}/big.png", "over the limit", policy)


def test_error_names_the_failing_entry():
    good = encode(random_rgb(4, 4), "PNG")
    with pytest.raises(ImageInputError, match=r"^image_data\[2\]: invalid base64"):
        load_images([good, b64(good), "???"], POLICY)
