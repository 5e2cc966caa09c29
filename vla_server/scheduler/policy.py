"""Who runs next: queue order (priority, deadline, arrival), admission budgets, and which
running requests a more important one may preempt."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vla_server.config import SchedulerConfig
from vla_server.scheduler.req import Req


@dataclass(frozen=True)
class PolicyConfig:
    max_running_requests: int
    chunked_prefill_size: int | None  # None: whole prompts in one forward
    reserve_ratio: float = 1.0  # share of each request's remaining new tokens kept free for it
    priority_enabled: bool = False
    low_values_first: bool = False
    preemption_threshold: int = 10
    preemption_enabled: bool = True

    @classmethod
    def from_config(cls, cfg: SchedulerConfig) -> PolicyConfig:
        chunk = cfg.chunked_prefill_size
        return cls(
            max_running_requests=cfg.max_running_requests,
            chunked_prefill_size=chunk if chunk > 0 else None,
            reserve_ratio=cfg.decode_reserve_ratio,
            priority_enabled=cfg.enable_priority_scheduling,
            low_values_first=cfg.schedule_low_priority_values_first,
            preemption_threshold=cfg.priority_scheduling_preemption_threshold,
            preemption_enabled=not cfg.disable_priority_preemption,
        )

    def rank(self, req: Req) -> int:
        """Smaller runs first."""
        if not self.priority_enabled:
            return 0
        return req.priority if self.low_values_first else -req.priority

    def queue_key(self, req: Req) -> tuple[int, float, float]:
        # Within a priority class the earliest deadline first, then arrival order.
        deadline = req.deadline if req.deadline is not None else math.inf
        return self.rank(req), deadline, req.arrival_time

    def may_preempt(self, new: Req, running: Req) -> bool:
        if not (self.priority_enabled and self.preemption_enabled):
            return False
        return self.rank(running) - self.rank(new) > self.preemption_threshold


def reservation(req: Req, ratio: float) -> int:
    """KV tokens a request will still need: the rest of its prompt and its new tokens."""
    return req.num_new_tokens + math.ceil(req.remaining_new_tokens() * ratio)


class PrefillAdder:
    """Budgets of one scheduling step: request slots, KV tokens, prefill (chunk) tokens."""

    def __init__(
        self, cfg: PolicyConfig, ratio: float, available: int, free_rows: int, running: list[Req]
    ):
        self.cfg = cfg
        self.ratio = ratio
        self.token_budget = available - sum(reservation(r, ratio) for r in running)
        self.slot_budget = min(cfg.max_running_requests - len(running), free_rows)
        self.chunk_budget = cfg.chunked_prefill_size or math.inf

    def _need(self, req: Req, prefix_len: int) -> int:
        return req.seq_len - prefix_len + math.ceil(req.remaining_new_tokens() * self.ratio)

    def shortfall(self, req: Req, prefix_len: int) -> tuple[int, int]:
        """(slots, tokens) missing to admit `req` with `prefix_len` cached tokens."""
        return max(1 - self.slot_budget, 0), max(self._need(req, prefix_len) - self.token_budget, 0)

    def admit(self, req: Req, prefix_len: int) -> None:
        self.slot_budget -= 1
        self.token_budget -= self._need(req, prefix_len)

    def take_chunk(self, need: int, at_least: int = 0) -> int:
        """Tokens of `need` this step computes: within the chunk budget, but never fewer than
        `at_least` (a bidirectional prefix is one chunk, even one larger than the budget)."""
        n = int(min(need, max(self.chunk_budget, at_least)))
        self.chunk_budget -= n
        return n

    def give_back(self, req: Req) -> None:
        """A preempted request's slot and reservation return to the budgets."""
        self.slot_budget += 1
        self.token_budget += reservation(req, self.ratio) + req.kv_len


def choose_victims(
    cfg: PolicyConfig, new: Req, running: list[Req], slots: int, tokens: int
) -> list[Req] | None:
    """Running requests to retract so `new` fits: worst priority first, then those the
    background lane does not hold (retracting one of those waits for its step), newest first;
    only those `new` outranks by more than the threshold; None if even all of them would not
    make room."""
    candidates = sorted(
        (r for r in running if not r.finished and cfg.may_preempt(new, r)),
        key=lambda r: (-cfg.rank(r), r.in_background, -r.arrival_time),
    )
    chosen: list[Req] = []
    for r in candidates:
        if slots <= 0 and tokens <= 0:
            break
        chosen.append(r)
        slots -= 1
        tokens -= reservation(r, cfg.reserve_ratio) + r.kv_len
    return chosen if slots <= 0 and tokens <= 0 else None


def retraction_order(cfg: PolicyConfig, running: list[Req]) -> list[Req]:
    """Victims under KV pressure: lowest priority first, then the fewest output tokens."""
    return sorted(running, key=lambda r: (-cfg.rank(r), len(r.output_ids), -r.arrival_time))
