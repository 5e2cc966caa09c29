"""Shared by the SmolVLA tests: tiny folders built once per process, and raw observations."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

import torch

from tests.support import smolvla_reference as ref
from vla_server.policies.smolvla.policy import SmolVLAPolicy
from vla_server.policies.smolvla.processor import Observation
from vla_server.policies.smolvla.tiny import CAMERAS, STATE_DIM, TinySpec, build_tiny_smolvla

_ROOT = Path(tempfile.mkdtemp(prefix="smolvla-tests-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)

# Camera 1 is letterboxed (48 x 64: 8 rows of zero padding at the top after the resize to
# 24 x 32), camera 2 upscaled from 40 x 30 to 32 x 24 (8 columns of padding on the left).
IMAGE_SHAPES = {CAMERAS[0]: (48, 64), CAMERAS[1]: (40, 30)}
INSTRUCTIONS = (
    "pick up the red block",
    "open the top drawer and put the sponge inside then close it again carefully",
)
STATES = ((0.3, -1.2, 0.5, 2.0, -0.7, 1.1), (-0.7, 0.1, 1.5, -0.4, 2.2, -1.9))


@cache
def tiny_folder(spec: TinySpec = TinySpec()) -> Path:
    name = "-".join(f"{k}={v}" for k, v in sorted(vars(spec).items()) if k != "cameras")
    return build_tiny_smolvla(_ROOT / name.replace("=", "_"), spec)


@cache
def policy(spec: TinySpec = TinySpec(), dtype: torch.dtype = torch.float32) -> SmolVLAPolicy:
    return SmolVLAPolicy.from_folder(tiny_folder(spec), dtype=dtype)


@cache
def reference(spec: TinySpec = TinySpec()) -> ref.Reference:
    return ref.load_reference(tiny_folder(spec))


def images(cameras: tuple[str, ...], seed: int, rows: int = 1) -> dict[str, torch.Tensor]:
    """Random float [0, 1] frames [rows, 3, H, W] per camera."""
    g = torch.Generator().manual_seed(seed)
    return {cam: torch.rand((rows, 3, *IMAGE_SHAPES[cam]), generator=g) for cam in cameras}


def observation(
    cameras: tuple[str, ...], instruction: str, state: tuple[float, ...], seed: int = 0
) -> Observation:
    assert len(state) == STATE_DIM
    return Observation(images(cameras, seed), torch.tensor([state]), [instruction])
