"""The `vlm/` folder of a tiny SmolVLA checkpoint: a tiny SmolVLM2 (Idefics3-family) config, a
byte-level BPE tokenizer trained offline on a fixed corpus, and SmolVLM2's image processor and
processor configs, laid out as `HuggingFaceTB/SmolVLM2-500M-Video-Instruct` is (no weights:
the policy's `model.safetensors` holds them), so that transformers' `AutoConfig`,
`AutoTokenizer` and `AutoProcessor` load it.

Special tokens as SmolVLM2's: `<|im_start|>` is BOS, `<|im_end|>` pads, `<end_of_utterance>`
ends; no post-processor, so no BOS is added.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import PreTrainedTokenizerFast, SmolVLMConfig

from vla_server.model.tokenizer import train_byte_level_bpe

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    "<end_of_utterance>",
)
CORPUS = (
    "pick up the red block and place it in the bin",
    "open the top drawer and put the sponge inside",
    "push the blue cube to the left edge of the table",
    "stack the green cup on the yellow plate",
    "grasp the handle and pull the door open slowly",
    "move the arm to the home position",
    "put the marker into the mug next to the laptop",
    "fold the towel in half then place it on the shelf",
)
VOCAB_SIZE = 400
IMAGE_SIZE, PATCH_SIZE, SCALE_FACTOR = 32, 4, 2
TEXT_LAYERS = 6


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE with SmolVLM2's special tokens (ids 0-6), trained on `CORPUS`."""
    tok = train_byte_level_bpe(list(CORPUS) * 4, VOCAB_SIZE, SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        extra_special_tokens={
            "fake_image_token": "<fake_token_around_image>",
            "image_token": "<image>",
            "global_image_token": "<global-img>",
            "end_of_utterance_token": "<end_of_utterance>",
        },
    )


def vlm_config(vocab_size: int) -> SmolVLMConfig:
    """SmolVLM2-500M's shape at toy size; rope_theta 100000 as the real one (SmolVLA ignores it)."""
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "layer_norm_eps": 1e-6,
        "hidden_act": "gelu_pytorch_tanh",
    }
    text = {
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "rope_theta": 100000.0,
        "max_position_embeddings": 512,
        "pad_token_id": 2,
        "tie_word_embeddings": False,
    }
    image_token = SPECIAL_TOKENS.index("<image>")
    return SmolVLMConfig(
        vision_config=vision,
        text_config=text,
        scale_factor=SCALE_FACTOR,
        image_token_id=image_token,
        tie_word_embeddings=False,
    )


def write_vlm_folder(folder: Path) -> int:
    """Write the tiny SmolVLM2 folder; returns its vocabulary size."""
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(folder)
    vocab = len(tokenizer)
    vlm_config(vocab).save_pretrained(folder)
    tokens_per_image = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
    _write_json(
        folder / "processor_config.json",
        {"image_seq_len": tokens_per_image, "processor_class": "SmolVLMProcessor"},
    )
    _write_json(folder / "preprocessor_config.json", _image_processor())
    return vocab


def _image_processor() -> dict:
    return {
        "do_convert_rgb": True,
        "do_image_splitting": True,
        "do_normalize": True,
        "do_pad": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "SmolVLMImageProcessor",
        "max_image_size": {"longest_edge": IMAGE_SIZE},
        "processor_class": "SmolVLMProcessor",
        "resample": 1,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 4 * IMAGE_SIZE},
    }


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
