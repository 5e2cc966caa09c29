"""Attention backends by name, imported lazily so that a CPU box never imports GPU-only kernels."""

from __future__ import annotations

import importlib

import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.attention.base import AttentionBackend

# name -> "module:class"; a backend registers by adding its line here.
ATTENTION_BACKENDS: dict[str, str] = {
    "torch": "vla_server.model.attention.torch_backend:TorchAttentionBackend",
    "triton": "vla_server.model.attention.triton_backend:TritonAttentionBackend",
}


def resolve_backend_name(name: str, device: torch.device) -> str:
    """`"auto"` picks Triton on CUDA once it is registered, torch otherwise."""
    if name == "auto":
        return "triton" if device.type == "cuda" and "triton" in ATTENTION_BACKENDS else "torch"
    if name not in ATTENTION_BACKENDS:
        known = ", ".join(["auto", *ATTENTION_BACKENDS])
        raise ValueError(f"unknown attention backend {name!r} (known: {known})")
    return name


def create_attention_backend(
    name: str, req_to_token_pool: ReqToTokenPool, kv_pool: TokenToKVPool, device: torch.device
) -> AttentionBackend:
    module_name, class_name = ATTENTION_BACKENDS[resolve_backend_name(name, device)].split(":")
    backend_class = getattr(importlib.import_module(module_name), class_name)
    return backend_class(req_to_token_pool, kv_pool)
