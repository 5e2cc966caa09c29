"""Random-weight Llama checkpoints for benchmarks, built deterministically into the cache."""

from __future__ import annotations

from pathlib import Path

import torch

from vla_server.model.checkpoint_cache import cached_folder

# name -> LlamaConfig fields; "medium" is sized so a CPU decode step is several milliseconds;
# "text45m" is medium's width at 4 layers (about 45M parameters), the text-only priority workload.
_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)
SIZES: dict[str, dict[str, int]] = {
    name: dict(zip(_FIELDS, dims, strict=True))
    for name, dims in {
        "small": (256, 704, 4, 4, 2),
        "medium": (1024, 2816, 8, 16, 4),
        "text45m": (1024, 2816, 4, 16, 4),
        "1b": (2048, 5632, 16, 32, 8),
    }.items()
}


def _build(size: str, out: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from vla_server.policies.llava.demo_tokenizer import build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    config = LlamaConfig(
        vocab_size=(len(tokenizer) + 63) // 64 * 64,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.05,
        **SIZES[size],
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"built bench model {size}: {n_params / 1e6:.1f}M parameters")


def bench_model_path(size: str) -> Path:
    if size not in SIZES:
        raise ValueError(f"unknown bench model {size!r} (one of {', '.join(SIZES)})")
    return cached_folder(f"bench-llama-{size}-v1", lambda out: _build(size, out))
