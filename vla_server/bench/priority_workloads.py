"""The workloads of the priority benchmark: who the protected robot and its neighbours are.

* `image`: the demo VLA; the action robot sends short action-like requests (a fixed
  instruction and a new observation, as token ids) while the low robots, in the benchmark's own
  process, stream long answers; the server runs `--max-running-requests N`, so the action robot
  must preempt.
* `text`: a 45M-parameter text-only Llama (`text45m`) as a new user would try it: text prompts
  the node tokenizes, a 10 Hz priority-10 loop of 61-token prompts and 16 streamed tokens, and 8
  priority-0 robots streaming 81-token prompts back to back from a separate client process (as
  other programs on the robot's network would).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from vla_server.bench.scheduler_common import gen_body, prompt_ids


@dataclass(frozen=True)
class Workload:
    name: str
    model: str  # a bench model name (`--model`)
    high_prompt: int  # prompt tokens of the action robot's requests
    high_tokens: int  # new tokens per action request
    high_priority: int
    low_prompt: int
    low_tokens: int
    text_prompts: bool  # prompts as text the node tokenizes (else as `input_ids`)
    lows_in_process: bool  # else the low robots run in a client process of their own
    cap_running: bool  # `--max-running-requests` = the low robots (the action robot preempts)
    reps: int
    warmup: int
    rounds: int
    realtime_priority: int
    max_hold_ms: float
    reserve_ms: float
    shared_instruction: int  # leading tokens every action request shares (a fixed instruction)


LOW = 0
WORKLOADS = {
    "image": Workload(
        name="image",
        model="demo",
        high_prompt=32,
        high_tokens=7,
        high_priority=100,
        low_prompt=32,
        low_tokens=48,
        text_prompts=False,
        lows_in_process=True,
        cap_running=True,
        reps=10,
        warmup=5,
        rounds=2,
        realtime_priority=100,
        max_hold_ms=50.0,
        reserve_ms=10.0,
        shared_instruction=24,
    ),
    "text": Workload(
        name="text",
        model="text45m",
        high_prompt=61,
        high_tokens=16,
        high_priority=10,
        low_prompt=81,
        low_tokens=16,
        text_prompts=True,
        lows_in_process=False,
        cap_running=False,
        reps=20,
        warmup=5,
        rounds=1,
        realtime_priority=10,
        max_hold_ms=50.0,
        reserve_ms=10.0,
        shared_instruction=0,
    ),
}


def request_body(prompt: dict[str, object], max_new_tokens: int, priority: int) -> dict:
    """A greedy `/generate` body of `prompt` (its `text` or `input_ids` field)."""
    body = gen_body([], max_new_tokens, priority=priority)
    del body["input_ids"]
    return body | prompt


class Prompts:
    """Prompts of a given token count, as ids or as text the node's tokenizer turns back into
    exactly those many tokens."""

    def __init__(self, workload: Workload, model_path: Path):
        self.text = workload.text_prompts
        self.instruction = prompt_ids(workload.shared_instruction, seed=7)
        self.tokenizer = None
        if self.text:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(model_path)

    def high(self, n: int, seed: int) -> dict[str, object]:
        return self.body_prompt(n - len(self.instruction), seed, self.instruction)

    def body_prompt(self, n: int, seed: int, head: list[int] | None = None) -> dict[str, object]:
        """The request fields of an `n`-token prompt (after `head`) drawn from `seed`."""
        if not self.text:
            return {"input_ids": (head or []) + prompt_ids(n, seed)}
        return {"text": self._text(n, seed)}

    def _text(self, n: int, seed: int) -> str:
        """Words of the tokenizer's own vocabulary until the encoding has `n` tokens."""
        tok = self.tokenizer
        assert tok is not None
        rng = random.Random(seed)
        words = _WORDS
        text = ""
        while True:
            longer = text + rng.choice(words)
            count = len(tok(longer, add_special_tokens=False)["input_ids"])
            if count > n:
                return text if text else longer
            text = longer
            if count == n:
                return text


_WORDS = tuple(
    f" {w}"
    for w in (
        "pick up the red block and place it in the blue cup near the green bowl on the left",
        "side of the table then open the drawer slowly move the sponge to the right stack two",
        "cubes lift the lid push the button slide the tray close the door grasp handle gently",
    )
    for w in w.split()
)
