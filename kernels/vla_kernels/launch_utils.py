"""What every kernel launcher needs to decide before it launches.

Triton is imported lazily so that ``import vla_kernels`` (and the torch references) works on
machines without Triton. Whether a ``@triton.jit`` function runs compiled or interpreted is fixed
when its module is first imported (``TRITON_INTERPRET`` is read at decoration time), which is why
each launcher imports its kernel module on first use rather than at the top.
"""

from __future__ import annotations

import functools
import importlib.util

import torch


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret)


def require_launchable(*tensors: torch.Tensor) -> None:
    """Fail with a readable message instead of Triton's '0 active drivers' on CPU tensors."""
    if not triton_available():
        raise RuntimeError("Triton is not installed; use the torch attention backend")
    if all(t.device.type == "cuda" for t in tensors):
        return
    if not interpreting():
        raise RuntimeError(
            "Triton kernels need CUDA tensors, or TRITON_INTERPRET=1 in the environment to run "
            "them on CPU tensors through the interpreter"
        )
    if not _standard_library_interpreted():
        raise RuntimeError(
            "TRITON_INTERPRET=1 was set after triton.language had been imported (transformers "
            "imports it), so Triton's own helpers are compiled; set it before starting Python"
        )


def _standard_library_interpreted() -> bool:
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.sum, InterpretedFunction)


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def upcast_in_kernel(dtype: torch.dtype) -> bool:
    """The interpreter keeps bf16 as raw uint16, so arithmetic on it needs fp32 operands."""
    return dtype == torch.bfloat16 and interpreting()


def dot_precision(dtype: torch.dtype) -> str:
    # tf32 would cost fp32 pools three decimal digits; half types ignore the setting.
    return "ieee" if dtype == torch.float32 else "tf32"


@functools.cache
def multiprocessor_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def check_attention_operands(
    q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor
) -> None:
    if q.shape[1] % k_buffer.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k_buffer.shape[1]}")
    if not (q.dtype == k_buffer.dtype == v_buffer.dtype):
        raise ValueError(f"dtypes differ: q {q.dtype}, k {k_buffer.dtype}, v {v_buffer.dtype}")
    if q.shape[-1] != k_buffer.shape[-1] or k_buffer.shape != v_buffer.shape:
        raise ValueError(f"head shapes differ: q {q.shape}, k {k_buffer.shape}, v {v_buffer.shape}")
    if q.stride(-1) != 1 or k_buffer.stride(-1) != 1 or v_buffer.stride(-1) != 1:
        raise ValueError("the head dimension must be contiguous")
