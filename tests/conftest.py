"""Suite-wide set-up that must happen before any test module is imported.

Triton fixes "compiled or interpreted" for each @triton.jit function, its own standard library
(tl.sum, tl.max, ...) included, when the function is defined, i.e. when triton.language is first
imported. transformers imports it through torch._dynamo, so on a machine without CUDA the Triton
interpreter must be switched on here, before any test module imports transformers.

Also the fixtures that tests in more than one folder share.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def inproc_rclpy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """rclpy initialised for one test (the shim on its in-process transport when ROS is absent)."""
    from ros_bridge.compat import rclpy

    monkeypatch.setenv("VLA_SHIM_TRANSPORT", "inproc")
    rclpy.init(args=[])
    try:
        yield
    finally:
        rclpy.try_shutdown()


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread for a module: tiny matmuls run fastest so, above all on a shared,
    loaded box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
