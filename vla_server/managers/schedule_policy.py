"""Admission of waiting requests into a prefill batch under request-slot and KV budgets."""

from __future__ import annotations

from vla_server.managers.req import Req


class PrefillAdder:
    """Admits requests while every admitted and running request can still finish.

    Each running request keeps a reservation for its remaining new tokens, so admission never
    over-commits the KV pool and a decode step can never run out of slots.
    """

    def __init__(self, free_tokens: int, running: list[Req], max_running_requests: int):
        self.token_budget = free_tokens - sum(r.remaining_new_tokens() for r in running)
        self.slot_budget = max_running_requests - len(running)
        self.admitted: list[Req] = []

    def try_add(self, req: Req) -> bool:
        need = req.seq_len - req.kv_len + req.remaining_new_tokens()
        if self.slot_budget <= 0 or need > self.token_budget:
            return False
        self.token_budget -= need
        self.slot_budget -= 1
        self.admitted.append(req)
        return True
