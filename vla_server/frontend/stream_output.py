"""The chunks of a `/generate` stream as SGLang sends them.

The TokenizerManager's chunks carry what is new since the previous chunk. SGLang's default, and
what its clients (sglang-router, `sglang.bench_serving`, ...) count on, is that each chunk
carries everything generated so far: the full `text` and `output_ids`, and in `meta_info` the
full logprob lists. `--incremental-streaming-output` keeps the deltas. `actions` stays the action
vectors completed since the previous chunk either way, with `meta_info.num_actions` the running
total: a robot acts on each vector once.
"""

from __future__ import annotations

from typing import Any

_LOGPROB_KEYS = (
    "output_token_logprobs",
    "output_top_logprobs",
    "input_token_logprobs",
    "input_top_logprobs",
)


class _SoFar:
    """What one prompt of the stream has generated so far."""

    def __init__(self) -> None:
        self.text = ""
        self.output_ids: list[int] = []
        self.logprobs: dict[str, list[Any]] = {}

    def add(self, chunk: dict[str, Any]) -> dict[str, Any]:
        self.text += chunk["text"]
        self.output_ids += chunk["output_ids"]
        meta = dict(chunk["meta_info"])
        for key in _LOGPROB_KEYS:
            if key in meta:
                self.logprobs[key] = meta[key] = self.logprobs.get(key, []) + meta[key]
        return {**chunk, "text": self.text, "output_ids": list(self.output_ids), "meta_info": meta}


class CumulativeStream:
    """Turns the delta chunks of one stream (one or a batch of prompts, told apart by their
    `index`) into cumulative ones."""

    def __init__(self) -> None:
        self._prompts: dict[int, _SoFar] = {}

    def __call__(self, chunk: dict[str, Any]) -> dict[str, Any]:
        return self._prompts.setdefault(chunk.get("index", 0), _SoFar()).add(chunk)


def stream_shaper(incremental: bool) -> Any:
    """The per-stream chunk shaper: identity with `--incremental-streaming-output`."""
    return (lambda chunk: chunk) if incremental else CumulativeStream()
