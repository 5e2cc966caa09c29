"""Compile every Triton kernel for CUDA targets on any machine, GPU or not:
``python -m vla_kernels.compile_check [--arch 80 87 90] [--quick]``.

The interpreter runs kernels as Python and so misses what only the compiler rejects (non-constexpr
globals, dot shapes, type errors, shared memory). Here the real launchers run on CPU tensors with
a stand-in driver that reports the chosen CUDA target; Triton's own binder specialises the
arguments as it would on a GPU, and a jit-cache hook compiles that exact specialisation down to
a cubin (with the ptxas bundled in the Triton wheel) instead of launching it.
Must run without TRITON_INTERPRET (the kernels must be defined as compiled functions).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from vla_kernels import decode_attention, extend_attention, rmsnorm, rotary
from vla_kernels.launch_utils import interpreting

# Largest dynamic shared memory per block (bytes) by compute capability.
SHARED_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


@dataclass
class Compiled:
    arch: int
    case: str
    kernel: str
    shared_bytes: int

    @property
    def fits(self) -> bool:
        return self.shared_bytes <= SHARED_LIMIT.get(self.arch, min(SHARED_LIMIT.values()))


class _TargetOnlyDriver:
    """Just enough of a Triton driver for the binder and the compiler; launches never happen."""

    def __init__(self, arch: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        # Triton caches binders per device; one fake device per target keeps them apart.
        return self.target.arch

    def get_current_stream(self, device: int) -> int:
        return 0


@contextlib.contextmanager
def _compile_instead_of_launch(arch: int, case: str, out: list[Compiled]) -> Iterator[None]:
    import triton
    from triton import knobs
    from triton.runtime import driver

    def hook(*, fn, compile, **_) -> bool:
        jit = fn.jit_function
        src = triton.compiler.ASTSource(
            jit, compile["signature"], compile["constants"], compile["configs"][0]
        )
        names = ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion")
        kernel = triton.compile(src, target=driver.active.get_current_target(),
                                options={k: compile[k] for k in names})  # fmt: skip
        out.append(Compiled(arch, case, jit.fn.__name__, kernel.metadata.shared))
        return True  # tells Triton the kernel is handled: no compile or launch of its own

    launchers = (decode_attention, extend_attention, rmsnorm, rotary)
    saved_checks = [m.require_launchable for m in launchers]
    saved_hook = knobs.runtime.jit_cache_hook
    # Restored as found: reset_active() would probe for a real driver and fail without a GPU.
    saved_driver = driver._active
    driver.set_active(_TargetOnlyDriver(arch))
    knobs.runtime.jit_cache_hook = hook
    for m in launchers:
        m.require_launchable = lambda *tensors: None
    try:
        yield
    finally:
        for m, check in zip(launchers, saved_checks, strict=True):
            m.require_launchable = check
        knobs.runtime.jit_cache_hook = saved_hook
        driver._active = saved_driver


@dataclass(frozen=True)
class AttentionCase:
    dtype: torch.dtype
    head_dim: int
    group: int  # query heads per kv head
    new_token_slots: bool = False

    @property
    def name(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{dtype} d={self.head_dim} gqa={self.group}"


ATTENTION_CASES = (
    AttentionCase(torch.bfloat16, 128, 4, new_token_slots=True),  # 7B-class
    AttentionCase(torch.float16, 80, 8),
    AttentionCase(torch.float32, 64, 1, new_token_slots=True),
)


def _attention_launches(case: AttentionCase) -> None:
    kv_heads, tokens = 2, 3
    q = torch.zeros((tokens, kv_heads * case.group, case.head_dim), dtype=case.dtype)
    k = torch.zeros((tokens, kv_heads, case.head_dim), dtype=case.dtype)
    pool = torch.zeros((9, kv_heads, case.head_dim), dtype=case.dtype)
    table = torch.zeros((2, 8), dtype=torch.int32)
    index = torch.zeros(1, dtype=torch.int64)
    slots = index if case.new_token_slots else None
    decode_attention.decode_attention(
        q[:1], pool, pool, table, index, index + 3, 0.1, new_token_slots=slots, num_kv_splits=4
    )
    extend_attention.extend_attention(
        q, k, k, pool, pool, table, index, index, index + tokens, index, 0.1
    )


def _norm_and_rotary_launches(dtype: torch.dtype) -> None:
    x = torch.zeros((2, 4096), dtype=dtype)
    rmsnorm.rmsnorm(x, x[0], 1e-6)
    rmsnorm.add_rmsnorm(x, x, x[0], 1e-6)
    cache = rotary.rotary_cos_sin_cache(torch.ones(64), 16)
    q, k = torch.zeros((2, 32, 128), dtype=dtype), torch.zeros((2, 8, 128), dtype=dtype)
    rotary.rotary_embedding(torch.zeros(2, dtype=torch.int64), q, k, cache)


def compile_all(archs: list[int], quick: bool) -> list[Compiled]:
    attention = ATTENTION_CASES[:1] if quick else ATTENTION_CASES
    cases: list[tuple[str, Callable[[], None]]] = [
        (c.name, lambda c=c: _attention_launches(c)) for c in attention
    ]
    cases.append(("bf16 norm/rotary", lambda: _norm_and_rotary_launches(torch.bfloat16)))
    out: list[Compiled] = []
    for arch in archs:
        for name, launch in cases:
            with _compile_instead_of_launch(arch, name, out):
                launch()
    return out


def main(argv: list[str] | None = None) -> int:
    prog = "python -m vla_kernels.compile_check"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--arch", type=int, nargs="+", default=[80, 87, 90])
    parser.add_argument("--quick", action="store_true", help="only the 7B-class attention case")
    args = parser.parse_args(argv)
    if interpreting():
        print(f"{prog}: unset TRITON_INTERPRET (it turns the kernels into Python functions)")
        return 2
    results = compile_all(args.arch, args.quick)
    for r in results:
        flag = "" if r.fits else "  EXCEEDS the shared memory of this target"
        print(f"sm_{r.arch}  {r.case:<22} {r.kernel:<24} shared {r.shared_bytes:>7} B{flag}")
    return 0 if all(r.fits for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
