"""Random-weight Llama checkpoints for the served-ITL measurement, built locally (no download).

``"1b"`` is a 1.1B-parameter Llama in TinyLlama-1.1B's shape (hidden 2048, 22 layers, 32 query /
4 KV heads, MLP 5632, vocabulary 32000, bf16); ``"tiny"`` has the same layout in miniature, for
developing the measurement on a CPU. Weights are drawn from a seeded generator on the build
device, so a build is reproducible there. The tokenizer is a word-level one that names every id
(``t123``), so whatever id a random model emits decodes to text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
WEIGHT_STD = 0.02  # Llama's initializer_range: keeps random activations in bf16 range


@dataclass(frozen=True)
class LlamaShape:
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    dtype: torch.dtype
    label: str


SHAPES = {
    "1b": LlamaShape(2048, 22, 32, 4, 5632, 32000, torch.bfloat16, "llama-1.1B bf16"),
    "tiny": LlamaShape(64, 2, 4, 2, 128, 512, torch.float32, "llama-tiny fp32"),
}


@dataclass(frozen=True)
class ItlCheckpoint:
    path: Path
    shape: LlamaShape
    # Bytes one decode step reads: every weight but the input embedding table, of which a step
    # reads one row per token (the lm_head is untied, so it is read in full).
    weight_bytes: int


def make_tokenizer(vocab: int):  # -> transformers.PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [*SPECIAL_TOKENS, *(f"t{i}" for i in range(len(SPECIAL_TOKENS), vocab))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<pad>",
    )  # fmt: skip


@torch.no_grad()
def _fill(model: torch.nn.Module, seed: int, device: torch.device) -> None:
    gen = torch.Generator(device=device).manual_seed(seed)
    for _, param in sorted(model.named_parameters()):
        if param.dim() == 1:  # RMSNorm scales
            param.fill_(1.0)
        else:
            param.normal_(0.0, WEIGHT_STD, generator=gen)


def build_checkpoint(
    shape: LlamaShape, out_dir: Path, device: str | torch.device = "cpu", seed: int = 0
) -> ItlCheckpoint:
    """Write config, safetensors weights and tokenizer of `shape` into `out_dir`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    device = torch.device(device)
    tok = make_tokenizer(shape.vocab)
    config = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.q_heads,
        num_key_value_heads=shape.kv_heads, max_position_embeddings=4096,
        tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, dtype=shape.dtype,
    )  # fmt: skip
    with device:
        model = LlamaForCausalLM(config).to(shape.dtype)
    _fill(model, seed, device)
    weight_bytes = sum(
        p.numel() * p.element_size()
        for name, p in model.named_parameters()
        if name != "model.embed_tokens.weight"
    )
    model.to("cpu").save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return ItlCheckpoint(Path(out_dir), shape, weight_bytes)
