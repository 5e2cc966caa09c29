"""transformers' own model on a test checkpoint: the independent reference of the served tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


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
