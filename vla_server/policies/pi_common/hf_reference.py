"""transformers' own pi0 / pi0.5 (`PI0ForConditionalGeneration`, `PI05ForConditionalGeneration`)
and pi0-FAST's PaliGemma (`PaliGemmaForConditionalGeneration`) built from a LeRobot or openpi pi
folder: the references the node's pi path is checked and timed against. They share no model
code with the node: only the folder's config dicts and tensors (renamed from openpi's names to
transformers') go in.

The time embedding's frequencies are set to openpi's float64 ones: transformers computes them,
and their products with t, in float32, where at t near 1 the arguments reach ~1571 rad and
float32 is off by ~1e-4; the checkpoints are openpi's, trained with float64 frequencies.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

PALIGEMMA = "paligemma_with_expert.paligemma."
EXPERT = "paligemma_with_expert.gemma_expert."
_SHARED_RENAMES = (
    (PALIGEMMA + "model.vision_tower.vision_model.", "model.vlm.vision_tower."),
    (PALIGEMMA + "model.multi_modal_projector.", "model.vlm.multi_modal_projector."),
    (PALIGEMMA + "model.language_model.", "model.vlm.language_model."),
    (PALIGEMMA + "lm_head.weight", "model.vlm.language_model.embed_tokens.weight"),  # tied
    (EXPERT + "model.", "model.dit."),
    ("action_out_proj.", "action_out_proj."),
)
_HEAD_TENSORS = {
    "pi0": ("state_proj", "action_in_proj", "action_time_mlp_in", "action_time_mlp_out"),
    "pi05": ("action_in_proj", "time_mlp_in", "time_mlp_out"),
}
# openpi's names -> transformers', per kind (the first prefix that matches applies).
RENAMES = {
    kind: _SHARED_RENAMES + tuple((f"{head}.", f"embed_action_time.{head}.") for head in heads)
    for kind, heads in _HEAD_TENSORS.items()
}


def checkpoint_tensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """The folder's tensors under openpi's bare names (a LeRobot `model.` prefix removed)."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(folder) / "model.safetensors"))
    return {name.removeprefix("model."): t for name, t in tensors.items()}


def folder_config(folder: str | Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "config.json").read_text())


def sinusoid_frequencies(width: int, min_period: float = 4e-3, max_period: float = 4.0):
    """2 pi / period over width / 2 periods, in float64 as openpi and LeRobot compute them."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    return 2 * math.pi / (min_period * (max_period / min_period) ** fraction)


def _config(kind: str, raw: dict[str, Any]) -> Any:
    from transformers import PI0Config, PI05Config

    sizes = {
        "chunk_size": raw.get("chunk_size", raw.get("action_horizon")),
        "max_action_dim": raw.get("max_action_dim", raw.get("action_dim")),
        "num_inference_steps": raw.get("num_inference_steps", 10),
    }
    common = {"vlm_config": raw["vlm_config"], "dit_config": raw["dit_config"], **sizes}
    if kind == "pi0":
        state = raw.get("max_state_dim", raw.get("action_dim"))
        return PI0Config(**common, max_state_dim=state)
    return PI05Config(**common)


def hf_policy(
    folder: str | Path, kind: str, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """transformers' `kind` ("pi0" or "pi05") model with the folder's weights, in eval mode,
    on `device` in `dtype` (the time embedding's frequencies stay float64)."""
    from transformers import PI0ForConditionalGeneration, PI05ForConditionalGeneration

    config = _config(kind, folder_config(folder))
    cls = PI0ForConditionalGeneration if kind == "pi0" else PI05ForConditionalGeneration
    with torch.device(device):  # a real-size model is built on the GPU, not in host memory
        model = cls(config).eval()
    state = {}
    for name, tensor in checkpoint_tensors(folder).items():
        rename = next(((old, new) for old, new in RENAMES[kind] if name.startswith(old)), None)
        if rename is not None:
            state[rename[1] + name[len(rename[0]) :]] = tensor
        elif name != EXPERT + "lm_head.weight":  # unused by both
            raise ValueError(f"{folder}: no transformers name for {name}")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if m != "model.dit.embed_tokens.weight"]:
        raise ValueError(f"{folder}: missing {missing}, unexpected {unexpected}")
    model.to(device=device, dtype=dtype)
    embeds = model.embed_action_time.sinusoid_embeds
    embeds.sinusoid_freq = sinusoid_frequencies(config.dit_config.hidden_size).to(device)
    return model


def hf_paligemma(folder: str | Path) -> torch.nn.Module:
    """transformers' PaliGemma with a pi0-FAST folder's weights (its embedding the saved,
    tied `lm_head`), in eval mode."""
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    config = PaliGemmaConfig.from_dict(folder_config(folder)["vlm_config"])
    model = PaliGemmaForConditionalGeneration(config).eval()
    state = {}
    for name, tensor in checkpoint_tensors(folder).items():
        name = name.removeprefix(PALIGEMMA)
        state[name.replace("vision_tower.vision_model.", "vision_tower.")] = tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing != ["model.language_model.embed_tokens.weight"] or unexpected:
        raise ValueError(f"{folder}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model
