"""Independent references for the front-end tests (OpenAI, /v1/actions, openpi).

* `openvla_decode`: OpenVLA's action decoding written out from its published formula (bin centres
  of `linspace(-1, 1, n_bins)`, bin index `end - id - 1` clipped to `[0, n_bins - 2]`,
  `0.5 * (x + 1) * (q99 - q01) + q01` where `mask`), with the statistics read straight from the
  checkpoint's `action_tokenizer.json` -- not through the server's ActionTokenizer.
* `HFLlava`: transformers' own `LlavaForConditionalGeneration.generate` fed by the checkpoint's
  own processor (its chat template, its image preprocessing), optionally constrained to the action
  bins by a logits processor.
"""

from __future__ import annotations

import base64
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import LogitsProcessor

TIE_GAP = (
    1e-3  # a greedy divergence is excusable only where the reference's top-2 gap is this small
)


def demo_path() -> Path:
    from vla_server.model.demo import demo_model_path

    return demo_model_path()


def random_image(seed: int, height: int = 224, width: int = 224) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def png_base64(pixels: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def read_action_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "action_tokenizer.json").read_text())


def bin_range(cfg: dict[str, Any]) -> range:
    first = cfg["bin_token_ids"]["first"]
    return range(first, first + cfg["n_bins"])


def openvla_decode(token_ids: list[int], cfg: dict[str, Any], unnorm_key: str) -> np.ndarray:
    """Flat bin token ids -> actions [n, action_dim] in robot units."""
    n_bins, dim = cfg["n_bins"], cfg["action_dim"]
    end = cfg["bin_token_ids"]["first"] + n_bins
    bins = np.linspace(cfg["min_action"], cfg["max_action"], n_bins)
    centers = (bins[:-1] + bins[1:]) / 2.0
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1, dim)
    normalized = centers[np.clip(end - ids - 1, 0, n_bins - 2)]
    stats = cfg["norm_stats"][unnorm_key]["action"]
    q01, q99 = np.asarray(stats["q01"]), np.asarray(stats["q99"])
    mask = np.asarray(stats["mask"], dtype=bool)
    return np.where(mask, 0.5 * (normalized + 1.0) * (q99 - q01) + q01, normalized)


def instruction_messages(instruction: str, num_images: int) -> list[dict[str, Any]]:
    """The layout the actions front ends promise: the instruction first, the images last."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": instruction}]
    return [{"role": "user", "content": parts + [{"type": "image"}] * num_images}]


class _OnlyIds(LogitsProcessor):
    """A logits processor that allows only the given token ids."""

    def __init__(self, allowed: range, vocab: int):
        self.mask = torch.ones(vocab, dtype=torch.bool)
        self.mask[allowed.start : allowed.stop] = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(self.mask, float("-inf"))


@dataclass
class Generated:
    prompt_len: int
    tokens: list[int]
    scores: torch.Tensor  # [steps, vocab], after the constraint

    def steps_before_tie(self) -> int:
        """How many leading tokens are decided by a clear margin (all of them, usually)."""
        for step, row in enumerate(self.scores):
            top2 = row.topk(2).values
            if float(top2[0] - top2[1]) < TIE_GAP:
                return step
        return len(self.tokens)


class HFLlava:
    def __init__(self, folder: Path):
        from transformers import AutoProcessor, LlavaForConditionalGeneration

        self.processor = AutoProcessor.from_pretrained(folder)
        self.model = LlavaForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
        self.model.eval()

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The chat template's token ids, images not expanded (what a client would render)."""
        tok = self.processor.tokenizer
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def generate(
        self,
        messages: list[dict[str, Any]],
        images: list[np.ndarray],
        max_new_tokens: int,
        allowed: range | None = None,
    ) -> Generated:
        text = self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        inputs = self.processor(text=text, images=images, return_tensors="pt")
        vocab = self.model.config.text_config.vocab_size
        extra = {"logits_processor": [_OnlyIds(allowed, vocab)]} if allowed else {}
        out = self.model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self.processor.tokenizer.pad_token_id,
            return_dict_in_generate=True,
            output_scores=True,
            **extra,
        )
        prompt_len = inputs["input_ids"].shape[1]
        tokens = out.sequences[0, prompt_len:].tolist()
        return Generated(prompt_len, tokens, torch.stack(out.scores)[:, 0].float())


def wait_idle(client: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    """/get_server_info once no request is pending in the front end or running in the scheduler
    (or the timeout passed: the caller asserts on what it returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.get("/get_server_info").json()
        busy = info["num_pending_requests"] or info["internal_states"][0]["num_running_reqs"]
        if not busy or time.monotonic() > deadline:
            return info
        time.sleep(0.1)
