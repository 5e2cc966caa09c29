"""The embedded demo checkpoint: a tiny LLaVA-style VLA with random weights, built locally.

`vla-server serve` without `--model-path` serves this folder, and tests build it the same way.
The same recipe always writes byte-identical files (seeded weights, deterministic tokenizer
training, JSON written in a fixed key order).

Folder (the Hugging Face `LlavaForConditionalGeneration` layout, loadable offline with
`LlavaForConditionalGeneration.from_pretrained` and `AutoProcessor.from_pretrained`):
`config.json`, `generation_config.json`, `model.safetensors` (fp32), `tokenizer.json`,
`tokenizer_config.json`, `chat_template.jinja`, `processor_config.json`, `action_tokenizer.json`.

Model: SigLIP vision tower (224x224, patch 16, hidden 128, 2 layers, no pooling head) ->
`vision_feature_select_strategy="full"` on `vision_feature_layer=-1` (the last encoder layer,
before the post-layernorm), so an image is (224/16)^2 = 196 `<image>` tokens -> 2-layer GELU MLP
projector -> Llama decoder (hidden 256, 4 layers, 4 heads, 2 KV heads, untied lm_head). Decoder
weights use std 0.2 so greedy outputs depend on the prompt and the image; the lm_head rows of
the action tokens are scaled up so greedy decoding mostly emits actions, and the rows of the
padding ids (see below) are zero. Tokenizer: see `vla_server.policies.llava.demo_tokenizer`.

Vocabulary (the OpenVLA padded-vocabulary trap, reproduced on purpose): the tokenizer has
V = len(tokenizer) ids and its last 256 are the action bins; the model's `vocab_size` is V
rounded up to the next multiple of 64 strictly above V. The bins are the last ids of the
TOKENIZER, not of the embedding matrix. (HF's `tokenizer.vocab_size` counts only the BPE part,
not the appended tokens: use `len(tokenizer)`.)

`action_tokenizer.json` (read by `vla_server.policies.bin_actions.action_tokenizer`):

    {
      "n_bins": 256,                 # number of action-bin tokens
      "action_dim": 7,               # tokens per action (one per dimension)
      "min_action": -1.0,            # bins are uniform over [min_action, max_action]
      "max_action": 1.0,
      "bin_token_ids": {"first": 435},  # the first of n_bins contiguous ids; null would mean
                                     # the last n_bins ids of the tokenizer's base vocabulary
                                     # (OpenVLA). The demo's bins are added tokens, outside the
                                     # base vocabulary, so it names them explicitly.
      "norm_stats": {                # per robot ("unnorm key"), per dimension
        "<robot>": {"action": {"q01": [7 floats], "q99": [7 floats], "mask": [7 bools]}}
      }
    }

Decoding follows OpenVLA: token id t -> bin index V - t - 1 clipped to [0, n_bins - 2] -> the
centre of that bin -> where mask is true, 0.5 * (x + 1) * (q99 - q01) + q01, else x unchanged.
Token `<act_k>` has id V - 1 - k, so its name is its bin index.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
    SiglipImageProcessorPil,
    SiglipVisionConfig,
)

from vla_server.model.checkpoint_cache import cached_folder
from vla_server.policies.demo_robots import ALOHA_DIM, ALOHA_Q01, ALOHA_Q99
from vla_server.policies.llava.demo_tokenizer import (
    IMAGE,
    MODEL_MAX_LENGTH,
    N_ACTION_BINS,
    build_demo_tokenizer,
)

DEMO_NAME = "demo-vla-v2"  # bump the version whenever the recipe changes: the cache rebuilds
ALOHA_DEMO_NAME = "demo-vla-aloha-v1"
IMAGE_SIZE, PATCH_SIZE = 224, 16
ACTION_DIM = 7
SEED = 1234
VOCAB_MULTIPLE = 64
DECODER_STD, PROJECTOR_STD, VISION_STD = 0.2, 0.1, 0.05
ACTION_LOGIT_SCALE = 2.0

NORM_STATS = {
    "demo_arm": {
        "action": {
            "q01": [-0.05, -0.05, -0.05, -0.2, -0.2, -0.2, 0.0],
            "q99": [0.05, 0.05, 0.05, 0.2, 0.2, 0.2, 1.0],
            "mask": [True, True, True, True, True, True, False],
        }
    },
    "aloha_left": {
        "action": {
            "q01": [-0.8, -0.1, -0.3, -1.2, -0.6, -1.5, 0.2],
            "q99": [0.8, 1.2, 1.1, 1.2, 0.9, 1.5, 1.1],
            "mask": [True, True, True, True, True, True, False],
        }
    },
}

# gym-aloha's joint ranges (demo_robots.py): any output of the random model, un-normalised
# between q01 and q99, is a valid, reachable joint target.
ALOHA_ACTION_DIM = ALOHA_DIM
ALOHA_NORM_STATS = {
    "aloha": {"action": {"q01": ALOHA_Q01, "q99": ALOHA_Q99, "mask": [True] * ALOHA_DIM}}
}


def padded_vocab_size(num_tokens: int) -> int:
    return (num_tokens // VOCAB_MULTIPLE + 1) * VOCAB_MULTIPLE


def demo_config(tokenizer: PreTrainedTokenizerFast) -> LlavaConfig:
    vision = SiglipVisionConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        vision_use_head=False,
    )
    text = LlamaConfig(
        vocab_size=padded_vocab_size(len(tokenizer)),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MODEL_MAX_LENGTH,
        initializer_range=DECODER_STD,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE),
        image_seq_length=(IMAGE_SIZE // PATCH_SIZE) ** 2,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
    )


def _param_std(name: str) -> float:
    if name.startswith("model.vision_tower."):
        return VISION_STD
    if name.startswith("model.multi_modal_projector."):
        return PROJECTOR_STD
    return DECODER_STD


@torch.no_grad()
def _init_weights(model: LlavaForConditionalGeneration, n_tokens: int) -> None:
    """Seeded init in parameter-name order, independent of transformers' own init code."""
    gen = torch.Generator().manual_seed(SEED)
    for name, param in sorted(model.named_parameters()):
        if name.endswith(".bias"):
            param.zero_()
        elif param.dim() == 1:  # layer/RMS norm scales
            param.fill_(1.0)
        else:
            param.copy_(torch.randn(param.shape, generator=gen) * _param_std(name))
    lm_head = model.lm_head.weight
    lm_head[n_tokens - N_ACTION_BINS : n_tokens] *= ACTION_LOGIT_SCALE
    lm_head[n_tokens:] = 0.0  # padding ids past the tokenizer: never the argmax


def demo_processor(tokenizer: PreTrainedTokenizerFast) -> LlavaProcessor:
    image_processor = SiglipImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="full",
        chat_template=tokenizer.chat_template,
        image_token=IMAGE,
        num_additional_image_tokens=0,
    )


def action_tokenizer_config(tokenizer: PreTrainedTokenizerFast) -> dict:
    return {
        "n_bins": N_ACTION_BINS,
        "action_dim": ACTION_DIM,
        "min_action": -1.0,
        "max_action": 1.0,
        "bin_token_ids": {"first": len(tokenizer) - N_ACTION_BINS},
        "norm_stats": NORM_STATS,
    }


def make_demo_model(out_dir: Path) -> Path:
    """Write the demo checkpoint into `out_dir` (created if missing) and return it."""
    out_dir = Path(out_dir)
    print(f"vla-server: building the demo VLA checkpoint in {out_dir} ...", flush=True)
    tokenizer = build_demo_tokenizer()
    config = demo_config(tokenizer)
    model = LlavaForConditionalGeneration(config)
    _init_weights(model, len(tokenizer))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    demo_processor(tokenizer).save_pretrained(out_dir)
    _write_action_tokenizer(out_dir, action_tokenizer_config(tokenizer))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vla-server: demo VLA ready ({n_params / 1e6:.2f}M parameters)", flush=True)
    return out_dir


def _write_action_tokenizer(out_dir: Path, config: dict) -> None:
    text = json.dumps(config, indent=2) + "\n"
    (out_dir / "action_tokenizer.json").write_text(text, encoding="utf-8")


def make_aloha_demo_model(out_dir: Path) -> Path:
    """The demo checkpoint with an action head for gym-aloha's two arms: the same weights and
    files, but 14-dim actions un-normalised with the `aloha` statistics (its only key)."""
    make_demo_model(out_dir)
    path = Path(out_dir) / "action_tokenizer.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(action_dim=ALOHA_ACTION_DIM, norm_stats=ALOHA_NORM_STATS)
    _write_action_tokenizer(Path(out_dir), config)
    return Path(out_dir)


def demo_model_path(cache_dir: Path | None = None) -> Path:
    """The demo checkpoint's folder in the cache, built on first use."""
    return cached_folder(DEMO_NAME, make_demo_model, cache_dir)


def aloha_demo_model_path(cache_dir: Path | None = None) -> Path:
    """The ALOHA variant's folder in the cache (`vla-bridge sim` drives the arms with it)."""
    return cached_folder(ALOHA_DEMO_NAME, make_aloha_demo_model, cache_dir)


def main(argv: list[str] | None = None) -> None:
    """`python -m vla_server.policies.llava.demo [aloha]`: builds (once) and prints the folder."""
    import argparse
    import contextlib
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("variant", nargs="?", choices=("arm", "aloha"), default="arm")
    variant = parser.parse_args(argv).variant
    with contextlib.redirect_stdout(sys.stderr):  # the build's progress; stdout is the path
        path = aloha_demo_model_path() if variant == "aloha" else demo_model_path()
    print(path)


if __name__ == "__main__":
    main()
