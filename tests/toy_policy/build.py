"""A tiny toy-policy folder: the tiny Llama's weights and tokenizer, its config under
`decoder`, and seeded head tensors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.support.tiny_checkpoints import make_llama
from tests.toy_policy.family import CONFIG_TYPE
from tests.toy_policy.head import PREFIX

SETTINGS = {"action_dim": 3, "state_dim": 2, "chunk_size": 4, "width": 5, "num_steps": 3}


def build_toy(out: Path, seed: int = 0) -> Path:
    llama = make_llama()
    shutil.copytree(llama, out, dirs_exist_ok=True)
    decoder = json.loads((llama / "config.json").read_text())
    config = {"type": CONFIG_TYPE, "decoder": decoder, "torch_dtype": "float32", **SETTINGS}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    kv_dim = (
        decoder["num_key_value_heads"] * decoder["hidden_size"] // decoder["num_attention_heads"]
    )
    g = torch.Generator().manual_seed(seed)
    width = SETTINGS["width"]
    tensors = load_file(out / "model.safetensors")
    tensors[PREFIX + "context.weight"] = torch.randn(width, kv_dim, generator=g) * 0.5
    for name in ("scale_x", "scale_t", "scale_state"):
        tensors[PREFIX + name] = torch.randn(width, generator=g)
    save_file(tensors, out / "model.safetensors")
    return out
