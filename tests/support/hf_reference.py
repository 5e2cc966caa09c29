"""transformers' own models on the test checkpoints: the independent reference of the served
tests (causal LMs for text, LLaVA fed by the checkpoint's own processor for images)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

TIE_GAP = 1e-3  # a greedy divergence is excusable only where the reference's top-2 gap is this


def causal_lm(path: str | Path, *, stop_at_eos: bool = False) -> Any:
    """The checkpoint in transformers (fp32, eval); without `stop_at_eos` generation ignores
    EOS, as the served requests that set ignore_eos."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if not stop_at_eos:
        model.generation_config.eos_token_id = None
    return model


@torch.no_grad()
def greedy_ids(model: Any, ids: list[int], n: int) -> list[int]:
    """transformers' greedy continuation of `ids` by up to `n` tokens."""
    out = model.generate(
        torch.tensor([ids]),
        max_new_tokens=n,
        do_sample=False,
        pad_token_id=0,
        # explicit, or generate masks out prompt tokens that equal the pad id
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
    )
    return out[0, len(ids) :].tolist()


def hf_greedy(path: str | Path, ids: list[int], n: int) -> list[int]:
    """`greedy_ids` on a freshly loaded checkpoint (EOS ignored)."""
    return greedy_ids(causal_lm(path), ids, n)


def assert_same_greedy(
    ours: list[int], ref: list[int], ref_logits: torch.Tensor, label: str = ""
) -> int:
    """Compare token for token; returns how many steps matched before an excused near-tie."""
    for step, (a, b) in enumerate(zip(ours, ref, strict=True)):
        if a != b:
            top2 = ref_logits[step].topk(2).values
            gap = float(top2[0] - top2[1])
            assert gap < TIE_GAP, f"{label} step {step}: ours {a}, reference {b}, gap {gap:.2e}"
            print(f"{label}: divergence at step {step} excused, reference top-2 gap {gap:.2e}")
            return step
    return len(ours)


@dataclass
class Generated:
    prompt_len: int
    tokens: list[int]
    scores: torch.Tensor  # [steps, vocab], after the constraint
    logits: torch.Tensor  # [steps, vocab], the model's own

    def steps_before_tie(self) -> int:
        """How many leading tokens are decided by a clear margin (all of them, usually)."""
        for step, row in enumerate(self.scores):
            top2 = row.topk(2).values
            if float(top2[0] - top2[1]) < TIE_GAP:
                return step
        return len(self.tokens)


class OnlyIds:
    """A logits processor (for `generate`) that allows only the `allowed` token ids."""

    def __init__(self, allowed: range, vocab: int):
        self.mask = torch.ones(vocab, dtype=torch.bool)
        self.mask[allowed.start : allowed.stop] = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(self.mask, float("-inf"))


class HFLlava:
    """`LlavaForConditionalGeneration.generate` fed by the checkpoint's own processor (its chat
    template, its image preprocessing), optionally constrained to a range of token ids."""

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
        return self.generate_text(text, images, max_new_tokens, allowed)

    @torch.no_grad()
    def generate_text(
        self,
        text: str,
        images: list[np.ndarray],
        max_new_tokens: int,
        allowed: range | None = None,
        *,
        stop_at_eos: bool = True,
        pixel_values: torch.Tensor | None = None,
    ) -> Generated:
        """`pixel_values`: the images preprocessed another way, in place of the processor's."""
        inputs = self.processor(text=text, images=images, return_tensors="pt")
        assert "attention_mask" in inputs  # explicit, or generate guesses it from the pad id
        if pixel_values is not None:
            assert pixel_values.shape == inputs["pixel_values"].shape
            inputs["pixel_values"] = pixel_values
        extra: dict[str, Any] = {} if stop_at_eos else {"eos_token_id": None}
        if allowed:
            vocab = self.model.config.text_config.vocab_size
            extra["logits_processor"] = [OnlyIds(allowed, vocab)]
        out = self.model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self.processor.tokenizer.pad_token_id,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
            **extra,
        )
        prompt_len = inputs["input_ids"].shape[1]
        tokens = out.sequences[0, prompt_len:].tolist()
        scores, logits = (torch.stack(s)[:, 0].float() for s in (out.scores, out.logits))
        return Generated(prompt_len, tokens, scores, logits)
