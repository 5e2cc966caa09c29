"""The sizes the pi families' built checkpoints come in: `TINY` (the tests' few-millisecond
models), `MID` (big enough that compute shows on a CPU: what the speed benchmarks time) and
`REAL` (the released models' dimensions, for the GPU benchmark).

MID: two cameras at 224 px in 14 px patches (256 tokens each, 512 per observation), SigLIP 4
layers x 256 (4 heads, MLP 1024), Gemma 6 layers x 512 (8 query heads and 1 KV head of 64, MLP
2048), the action expert 6 layers x 256 (MLP 1024; its heads are the backbone's), chunks of 50.
Weights are drawn at a spread that keeps a 512-wide stack's activations finite and varied.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaliGemmaDims:
    name: str  # "" for the tiny size: folder names carry the others
    image_size: int
    siglip_width: int
    siglip_layers: int
    siglip_heads: int
    siglip_mlp: int
    text_width: int
    text_layers: int
    text_heads: int
    head_dim: int
    text_mlp: int
    expert_width: int
    expert_mlp: int
    chunk: int
    spread: float  # std of the random matrices
    kv_heads: int = 1
    patch_size: int = 14

    @property
    def tokens_per_camera(self) -> int:
        return (self.image_size // self.patch_size) ** 2


TINY = PaliGemmaDims("", 28, 32, 2, 2, 64, 64, 2, 4, 16, 128, 32, 64, 4, 0.2)
MID = PaliGemmaDims("mid", 224, 256, 4, 4, 1024, 512, 6, 8, 64, 2048, 256, 1024, 50, 0.05)
# pi0's released dimensions: SigLIP So400m, Gemma 2B, the Gemma 300M expert (the vocabulary
# stays the tiny tokenizer's: an action head never reads the embedding table's other rows).
REAL = PaliGemmaDims("real", 224, 1152, 27, 16, 4304, 2048, 18, 8, 256, 16384, 1024, 4096, 50,
                     0.02)  # fmt: skip
SIZES = {"tiny": TINY, "mid": MID, "real": REAL}


def dims_named(size: str) -> PaliGemmaDims:
    if size not in SIZES:
        raise ValueError(f"unknown checkpoint size {size!r} (one of {', '.join(SIZES)})")
    return SIZES[size]
