"""Triton kernels for the GPU path, each beside a plain-torch reference (import name vla_kernels).

Importing this package, or any launcher module, needs neither Triton nor a GPU: the ``@triton.jit``
kernels live in the ``triton_*`` modules, which a launcher imports on its first launch.
"""
