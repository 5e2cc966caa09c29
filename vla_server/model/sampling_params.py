"""Per-request sampling parameters: SGLang's names, checked against the vocabulary.

The struct travels inside the wire request (`io_struct.TokenizedGenerateReqInput`), so every
field has a default. `n` is expanded by the front end into n requests; `seed` is this node's
older name of SGLang's `sampling_seed` (either may be given).
"""

from __future__ import annotations

import msgspec

MAX_N = 128  # OpenAI's bound on `n`: more samples of one prompt is a batch job, not a request
# Every stop string is checked against the text's tail at every step of the request.
MAX_STOPS, MAX_STOP_CHARS = 64, 1024


class SamplingParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = msgspec.field(default_factory=list)
    stop_token_ids: list[int] = msgspec.field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    logit_bias: dict[str, float] | None = None  # token id (a decimal string, as JSON keys) -> bias
    n: int = 1
    no_stop_trim: bool = False
    spaces_between_special_tokens: bool = True
    sampling_seed: int | None = None

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    @property
    def random_seed(self) -> int | None:
        return self.sampling_seed if self.sampling_seed is not None else self.seed

    @property
    def adjusts_logits(self) -> bool:
        """Penalties, bias or min tokens: the sampler changes this request's logits."""
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
            or bool(self.logit_bias)
            or self.min_new_tokens > 0
        )

    def validate(self, vocab_size: int, context_len: int | None = None) -> None:
        """Raise ValueError naming the first invalid field. More new tokens than the context
        holds is an error, as in SGLang (a silent clamp hides a client's mistake)."""
        max_new = f"must be in [0, {context_len}) (the context length)" if context_len else ""
        checks = (
            ("max_new_tokens", self.max_new_tokens >= 0, "must be >= 0"),
            ("max_new_tokens", not context_len or self.max_new_tokens < context_len, max_new),
            ("temperature", self.temperature >= 0, "must be >= 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("top_k", self.top_k == -1 or self.top_k >= 1, "must be -1 (off) or >= 1"),
            ("min_p", 0 <= self.min_p <= 1, "must be in [0, 1]"),
            (
                "stop_token_ids",
                all(0 <= t < vocab_size for t in self.stop_token_ids),
                f"must be token ids in [0, {vocab_size})",
            ),
            (
                "stop",
                len(self.stop) <= MAX_STOPS and all(len(x) <= MAX_STOP_CHARS for x in self.stop),
                f"must be at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters",
            ),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "must be in [-2, 2]"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "must be in [-2, 2]"),
            ("repetition_penalty", 0 < self.repetition_penalty <= 2, "must be in (0, 2]"),
            (
                "min_new_tokens",
                0 <= self.min_new_tokens <= self.max_new_tokens,
                "must be in [0, max_new_tokens]",
            ),
            (
                "logit_bias",
                all(_token_key(k, vocab_size) for k in self.logit_bias or {}),
                f"keys must be token ids in [0, {vocab_size})",
            ),
            ("n", 1 <= self.n <= MAX_N, f"must be in [1, {MAX_N}]"),
        )
        for name, ok, rule in checks:
            if not ok:
                got = repr(getattr(self, name))
                got = got if len(got) <= 80 else got[:80] + "..."  # a hostile value is long
                raise ValueError(f"{name} {rule}, got {got}")


def _token_key(key: str, vocab_size: int) -> bool:
    return key.strip().lstrip("-").isdigit() and 0 <= int(key) < vocab_size
