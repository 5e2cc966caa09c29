"""Read an image file from the local disk, only from inside one allow-listed directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vla_frames.image_errors import ImageInputError


def read_local_image(path_text: str, allowed_dir: str, max_bytes: int) -> bytes:
    """Bytes of ``path_text`` if it resolves (symlinks and ``..`` followed) inside ``allowed_dir``.

    Nothing about files outside the directory is revealed: the containment check runs before
    the file is even looked at.
    """
    path = Path(path_text)
    if not path.is_absolute():
        raise ImageInputError("local image path must be absolute")
    target = path.resolve()
    if not target.is_relative_to(Path(allowed_dir).resolve()):
        raise ImageInputError("local image path is outside the allowed media directory")
    try:
        # O_NOFOLLOW: the resolved path has no symlinks; refuse one swapped in since.
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ImageInputError(f"cannot open local image ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageInputError("local image path is not a regular file")
        if info.st_size > max_bytes:
            raise ImageInputError(
                f"image is {info.st_size} bytes, over the limit of {max_bytes} (--max-image-bytes)"
            )
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(max_bytes + 1)
    finally:
        os.close(fd)
