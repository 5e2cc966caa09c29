"""Deterministic tiny Hugging Face checkpoints with a real BPE tokenizer, built offline.

`make_llama`, `make_qwen2` and `make_llava` write a folder with `config.json`,
`generation_config.json`, safetensors weights (optionally sharded) and a tokenizer (`make_llava`:
a whole `LlavaProcessor`, tokenizer and image processor), and return its path. Without `out_dir`
the folder is cached under the system temp dir, keyed by the arguments, and built atomically, so
tests and processes can share it.

The weights are drawn with a fixed seed and a large `initializer_range` so that greedy outputs
depend on the context with clear logit margins; norm weights and biases (which transformers
initialises to constants) are randomised too, so a loader that mixes them up is caught.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import torch

CACHE_ROOT = Path(tempfile.gettempdir()) / "vla_tiny_checkpoints"
_FORMAT_VERSION = 2  # bump when the builders change, so cached folders are rebuilt
SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>", "<image>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}<image>{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_WORDS = (  # noqa: SIM905 - one readable block of words
    "pick up the red blue green yellow cube block ball cup bowl plate place put it on in into "
    "left right top bottom of from to move arm gripper open close slowly quickly robot table "
    "drawer push pull lift lower rotate turn a an and then next stack grasp release towards "
    "away camera image what is action should take do you see there object near far"
).split()


def _corpus() -> list[str]:
    rng = random.Random(1234)
    lines = []
    for _ in range(3000):
        words = rng.choices(_WORDS, k=rng.randint(4, 12))
        sentence = " ".join(words)
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ","]))
    lines += [f"step {i} joint {i % 7} value {i * 37 % 1000 / 100:.2f}" for i in range(500)]
    return lines


@cache
def make_tokenizer(vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer (PreTrainedTokenizerFast) with bos/eos/pad and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        extra_special_tokens={"image_token": "<image>"},
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok


def _text_config_kwargs(tok: Any, args: dict[str, Any]) -> dict[str, Any]:
    kwargs = {
        "vocab_size": len(tok),
        "hidden_size": args["hidden_size"],
        "intermediate_size": args["intermediate_size"],
        "num_hidden_layers": args["num_layers"],
        "num_attention_heads": args["num_heads"],
        "num_key_value_heads": args["num_kv_heads"],
        "max_position_embeddings": args["max_position_embeddings"],
        "initializer_range": 0.2,
        "tie_word_embeddings": args["tie_word_embeddings"],
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "rope_theta": args["rope_theta"],
    }
    if args["rope_scaling"] is not None:
        kwargs["rope_scaling"] = dict(args["rope_scaling"])
    return kwargs


def _randomise_constants(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            elif name.endswith("bias"):
                param.copy_(0.2 * torch.randn(param.shape, generator=generator))


def _save(model: Any, tok: Any, out: Path, max_shard_size: str | None, original: bool) -> None:
    """`tok` is a tokenizer or a processor (which saves its tokenizer too)."""
    tokenizer = getattr(tok, "tokenizer", tok)
    tok_ids = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    model.generation_config.eos_token_id = tok_ids
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(
        out, max_shard_size=max_shard_size or "50GB", save_original_format=original
    )
    tok.save_pretrained(out)


# The two tiny towers: 32x32 images in 8x8 patches. CLIP keeps LLaVA-1.5's settings (layer -2,
# CLS dropped); SigLIP concatenates two layers, keeps every patch, and has a projector without
# bias and with another activation, so each of those settings is exercised.
_VISION_TOWERS: dict[str, dict[str, Any]] = {
    "clip": {
        "config_class": "CLIPVisionConfig",
        "tower": {"num_hidden_layers": 2},
        "llava": {"vision_feature_layer": -2, "vision_feature_select_strategy": "default"},
        "processor": {"num_additional_image_tokens": 1},
    },
    "siglip": {
        "config_class": "SiglipVisionConfig",
        "tower": {"num_hidden_layers": 3},
        "llava": {
            "vision_feature_layer": [1, -2],
            "vision_feature_select_strategy": "full",
            "projector_hidden_act": "gelu_pytorch_tanh",
            "multimodal_projector_bias": False,
        },
        "processor": {"num_additional_image_tokens": 0},
    },
}


def _llava_model(tok: Any, text_kwargs: dict[str, Any], args: dict[str, Any]) -> Any:
    import transformers

    tower = _VISION_TOWERS[args["vision"]]
    vision_class = getattr(transformers, tower["config_class"])
    text_class = transformers.Qwen2Config if args["text"] == "qwen2" else transformers.LlamaConfig
    config = transformers.LlavaConfig(
        vision_config=vision_class(
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
            **tower["tower"],
        ),
        text_config=text_class(**text_kwargs),
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=args["tie_word_embeddings"],
        **tower["llava"],
    )
    return transformers.LlavaForConditionalGeneration(config)


def _llava_processor(tok: Any, vision: str) -> Any:
    import transformers

    if vision == "siglip":
        image_processor = transformers.SiglipImageProcessorPil(size={"height": 32, "width": 32})
    else:
        image_processor = transformers.CLIPImageProcessorPil(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        )
    return transformers.LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy=_VISION_TOWERS[vision]["llava"][
            "vision_feature_select_strategy"
        ],
        chat_template=CHAT_TEMPLATE,
        image_token="<image>",
        **_VISION_TOWERS[vision]["processor"],
    )


def _build(kind: str, out: Path, args: dict[str, Any]) -> None:
    import transformers

    tok = make_tokenizer(args["vocab_size"])
    text_kwargs = _text_config_kwargs(tok, args)
    torch.manual_seed(args["seed"])
    if kind == "llava":
        model = _llava_model(tok, text_kwargs, args)
        saved: Any = _llava_processor(tok, args["vision"])
    else:
        config_class = transformers.Qwen2Config if kind == "qwen2" else transformers.LlamaConfig
        model_class = (
            transformers.Qwen2ForCausalLM if kind == "qwen2" else transformers.LlamaForCausalLM
        )
        model = model_class(config_class(**text_kwargs))
        saved = tok
    _randomise_constants(model, args["seed"])
    _save(model, saved, out, args["max_shard_size"], args.get("original_layout", True))


def _cached_build(kind: str, out_dir: str | Path | None, args: dict[str, Any]) -> Path:
    if out_dir is not None:
        out = Path(out_dir)
        _build(kind, out, args)
        return out
    key = json.dumps([kind, _FORMAT_VERSION, args], sort_keys=True, default=str)
    out = CACHE_ROOT / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if (out / "tokenizer_config.json").exists():
        return out
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=CACHE_ROOT))
    _build(kind, tmp, args)
    try:
        os.rename(tmp, out)
    except OSError:  # another process finished the same folder first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def make_llama(
    out_dir: str | Path | None = None,
    *,
    num_layers: int = 2,
    hidden_size: int = 128,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 512,
    rope_theta: float = 10000.0,
    rope_scaling: dict[str, Any] | None = None,
    tie_word_embeddings: bool = False,
    vocab_size: int = 512,
    max_shard_size: str | None = None,
    seed: int = 0,
) -> Path:
    """A LlamaForCausalLM (GQA, untied lm_head by default)."""
    args = {k: v for k, v in locals().items() if k != "out_dir"}
    return _cached_build("llama", out_dir, args)


def make_qwen2(
    out_dir: str | Path | None = None,
    *,
    num_layers: int = 2,
    hidden_size: int = 128,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 512,
    rope_theta: float = 1000000.0,
    rope_scaling: dict[str, Any] | None = None,
    tie_word_embeddings: bool = True,
    vocab_size: int = 512,
    max_shard_size: str | None = None,
    seed: int = 1,
) -> Path:
    """A Qwen2ForCausalLM (GQA, qkv bias, tied embeddings by default)."""
    args = {k: v for k, v in locals().items() if k != "out_dir"}
    return _cached_build("qwen2", out_dir, args)


def make_llava(
    out_dir: str | Path | None = None,
    *,
    text: str = "llama",
    vision: str = "clip",
    original_layout: bool = False,
    num_layers: int = 2,
    tie_word_embeddings: bool = False,
    max_shard_size: str | None = None,
    seed: int = 2,
) -> Path:
    """A LlavaForConditionalGeneration with a tiny `vision` tower ("clip": 16 image tokens after
    dropping CLS; "siglip": 16 tokens, two concatenated layers) and a `text` decoder ("llama" or
    "qwen2", both GQA), saved with its LlavaProcessor (tokenizer, 32x32 image processor, chat
    template). `original_layout` saves the pre-transformers-5 tensor names
    (`language_model.model.*`) instead of `model.language_model.*`."""
    args = {k: v for k, v in locals().items() if k != "out_dir"}
    args.update(
        hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=256,
        max_position_embeddings=512,
        rope_theta=10000.0,
        rope_scaling=None,
        vocab_size=512,
    )
    return _cached_build("llava", out_dir, args)
