"""Test-only references for pi0-FAST, written from LeRobot's and openpi's semantics, sharing no
code with the node:

* the model: transformers' own `PaliGemmaForConditionalGeneration`, built from the tiny
  checkpoint's `vlm_config` and loaded from its LeRobot-named `model.safetensors`
  (`vla_server.policies.pi_common.hf_reference`, no node model code); greedy
  decoding with the prompt prefix marked by `token_type_ids` (0: bidirectional, 1: causal) and
  explicit RoPE positions, through transformers' KV cache;
* the images: LeRobot's `resize_with_pad_torch` + `* 2 - 1` on a float frame in [0, 1];
* the prompt: LeRobot's normaliser (torch float32), `np.digitize` into 256 bins, the
  `Task: ..., State: ...;\\n` text, BOS placement per convention;
* the FAST decode: the `tokenizers` BPE from `fast_tokenizer/tokenizer.json`, `ord - min_token`,
  LeRobot's relaxed pad/truncate when asked, scipy's orthonormal inverse DCT, LeRobot's
  quantile unnormaliser (torch float32).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vla_server.policies.pi_common.hf_reference import hf_paligemma as hf_policy_paligemma


@cache
def hf_paligemma(folder: str) -> torch.nn.Module:
    return hf_policy_paligemma(folder)


def lerobot_pixels(frame: np.ndarray, height: int, width: int) -> torch.Tensor:
    """uint8 [h, w, 3] -> float32 [3, H, W] in [-1, 1], as LeRobot's `_preprocess_images`."""
    img = torch.tensor(frame, dtype=torch.float32)[None] / 255.0  # [1, h, w, 3], channels last
    img = img.permute(0, 3, 1, 2)
    h, w = img.shape[-2:]
    if (h, w) != (height, width):
        ratio = max(w / width, h / height)
        rh, rw = int(h / ratio), int(w / ratio)
        img = F.interpolate(img, size=(rh, rw), mode="bilinear", align_corners=False)
        img = img.clamp(0.0, 1.0)
        pad_h0, rem_h = divmod(height - rh, 2)
        pad_w0, rem_w = divmod(width - rw, 2)
        img = F.pad(img, (pad_w0, pad_w0 + rem_w, pad_h0, pad_h0 + rem_h), value=0.0)
    return img[0] * 2.0 - 1.0


def _stats(folder: str, pipeline: str, feature: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    steps = json.loads((Path(folder) / pipeline).read_text())["steps"]
    state_file = next(s["state_file"] for s in steps if "state_file" in s)
    tensors = load_file(str(Path(folder) / state_file))
    return {k[len(feature) + 1 :]: v for k, v in tensors.items() if k.startswith(feature + ".")}


def state_bins(folder: str, state: list[float]) -> list[int]:
    """LeRobot's QUANTILES normaliser on the state, then openpi's 256-bin digitize."""
    stats = _stats(folder, "policy_preprocessor.json", "observation.state")
    x = torch.tensor(state, dtype=torch.float32)
    denom = stats["q99"] - stats["q01"]
    denom = torch.where(denom == 0, torch.tensor(1e-8), denom)
    normalized = (2.0 * (x - stats["q01"]) / denom - 1.0).numpy()
    return (np.digitize(normalized, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1).tolist()


def prompt_ids(tokenizer, instruction: str, bins: list[int], convention: str) -> list[int]:
    """The text part of an action prompt: prefix, then the causal "Action: " tokens."""
    task = instruction.strip().replace("_", " ").replace("\n", " ")
    if convention == "openpi":
        task = task.lower()
    text = f"Task: {task}, State: {' '.join(str(b) for b in bins)};\n"
    ids = tokenizer(text)["input_ids"]  # BOS first, as Gemma's tokenizer
    assert ids[0] == tokenizer.bos_token_id
    if convention == "lerobot":
        ids = ids + [tokenizer.bos_token_id]
    return ids + tokenizer("Action: ", add_special_tokens=False)["input_ids"]


@dataclass
class Greedy:
    tokens: list[int]
    last_logits: torch.Tensor  # float32 [vocab], before the last generated token


@torch.no_grad()
def greedy(
    model: torch.nn.Module,
    pixels: torch.Tensor,  # [n_images, 3, S, S]
    text_ids: list[int],
    causal_tail: int,
    shift: int,
    allowed: list[int] | None,
    stops: set[int],
    max_new: int,
) -> Greedy:
    """Greedy decoding through transformers' cache; images first, the prompt but its last
    `causal_tail` tokens bidirectional, the tokens after the prefix `shift` positions on."""
    per_image = model.config.text_config.num_image_tokens
    ids = [model.config.image_token_id] * (per_image * pixels.shape[0]) + text_ids
    prefix = len(ids) - causal_tail
    types = torch.tensor([[0] * prefix + [1] * causal_tail])
    positions = torch.arange(len(ids)) + shift * (torch.arange(len(ids)) >= prefix)
    out = model(
        input_ids=torch.tensor([ids]),
        pixel_values=pixels if pixels.shape[0] else None,
        token_type_ids=types,
        position_ids=positions[None],
        # Explicit, so transformers does not read a position gap as two packed sequences.
        attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
        use_cache=True,
    )
    cache, next_pos, tokens = out.cache, int(positions[-1]) + 1, []
    logits = out.logits[0, -1].float()
    for _ in range(max_new):
        masked = logits if allowed is None else _only(logits, allowed)
        token = int(masked.argmax())
        tokens.append(token)
        if token in stops or len(tokens) == max_new:
            break
        out = model(
            input_ids=torch.tensor([[token]]),
            position_ids=torch.tensor([[next_pos]]),
            cache=cache,
            use_cache=True,
        )
        cache, next_pos = out.cache, next_pos + 1
        logits = out.logits[0, -1].float()
    return Greedy(tokens, logits)


def _only(logits: torch.Tensor, allowed: list[int]) -> torch.Tensor:
    masked = torch.full_like(logits, float("-inf"))
    masked[allowed] = logits[allowed]
    return masked


def fast_actions(folder: str, pg_ids: list[int], relaxed: bool) -> np.ndarray | None:
    """The unnormalised chunk of PaliGemma FAST ids (None: it does not decode strictly)."""
    from scipy.fft import idct
    from tokenizers import Tokenizer

    root = Path(folder)
    config = json.loads((root / "config.json").read_text())
    processor = json.loads((root / "fast_tokenizer" / "processor_config.json").read_text())
    vocab = config["vlm_config"]["text_config"]["vocab_size"]
    tokens = [vocab - 1 - config["fast_skip_tokens"] - t for t in pg_ids]
    bpe = Tokenizer.from_file(str(root / "fast_tokenizer" / "tokenizer.json"))
    text = bpe.decode(tokens, skip_special_tokens=False)
    coeffs = np.array([ord(c) for c in text], dtype=np.int64) + processor["min_token"]
    horizon, dim = processor["time_horizon"], processor["action_dim"]
    if relaxed:
        coeffs = np.pad(coeffs[: horizon * dim], (0, max(horizon * dim - coeffs.size, 0)))
    elif coeffs.size != horizon * dim or "\ufffd" in text:
        return None
    chunk = idct(coeffs.reshape(horizon, dim) / processor["scale"], axis=0, norm="ortho")
    stats = _stats(folder, "policy_postprocessor.json", "action")
    x = torch.tensor(chunk, dtype=torch.float32)[
        :, : config["output_features"]["action"]["shape"][0]
    ]
    denom = stats["q99"] - stats["q01"]
    return ((x + 1.0) * denom / 2.0 + stats["q01"]).numpy()
