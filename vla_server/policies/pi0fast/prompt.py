"""pi0-FAST's prompt, in LeRobot's and openpi's conventions (shared/reference/pi0.md §3).

The prompt is the cameras' image tokens, then `BOS "Task: {task}, State: {bins};\\n"` with the
task cleaned (`strip()`, "_" and "\\n" to spaces) and the state discretised into 256 bins after
normalisation (`FastActionTokenizer.state_bins`); all of that is the bidirectional prefix. An
action request then continues causally with `"Action: "` (the tokens every training target
starts with, after which the FAST tokens follow) and generates FAST tokens until `|`.

* LeRobot (`PI0FastPytorch.sample_actions_fast_kv_cache`): the task keeps its case; a second
  BOS is appended to the prompt, inside the bidirectional prefix; positions run on
  contiguously (padding tokens do not advance them, so dropping them changes nothing).
* openpi (`FASTTokenizer`, `Pi0FAST.sample_actions`): the task is lower-cased; no second BOS;
  the generated tokens sit one position further on than their index (openpi feeds decode step
  k at `prefill_len + k + 1`; openpi issue #705).

Both models generate `"Action: "` themselves; here it is part of the prompt, which gives the same
tokens after it whenever the model would have generated those exact tokens (a trained one does:
every training target starts with them), and lets sampling be constrained to FAST tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vla_server.policies.pi_common.policy_inputs import clean_task

CONVENTIONS = ("lerobot", "openpi")
ACTION_START = "Action: "


@dataclass(frozen=True)
class Pi0FastPrompt:
    convention: str  # one of CONVENTIONS
    bos_id: int
    action_start_ids: tuple[int, ...]  # "Action: ", without special tokens

    @classmethod
    def create(cls, tokenizer: Any, convention: str) -> Pi0FastPrompt:
        """`convention`: the folder's own (pi0-FAST folders are LeRobot's: openpi converts no
        FAST checkpoint) unless the node was asked for the other."""
        if convention not in CONVENTIONS:
            raise ValueError(f"prompt convention {convention!r} is not one of {CONVENTIONS}")
        start = tokenizer(ACTION_START, add_special_tokens=False)["input_ids"]
        return cls(convention, tokenizer.bos_token_id, tuple(start))

    def task_text(self, instruction: str, state_bins: list[int]) -> str:
        task = clean_task(instruction)
        if self.convention == "openpi":
            task = task.lower()
        return f"Task: {task}, State: {' '.join(map(str, state_bins))};\n"

    def action_tail(self) -> list[int]:
        """What an action request's prompt ends with: the rest of the prefix (LeRobot's BOS),
        then the causal `"Action: "`."""
        closing = [self.bos_id] if self.convention == "lerobot" else []
        return closing + list(self.action_start_ids)

    @property
    def causal_tokens(self) -> int:
        """Tokens at the end of an action prompt that are not in the bidirectional prefix."""
        return len(self.action_start_ids)

    @property
    def position_shift(self) -> int:
        return 1 if self.convention == "openpi" else 0
