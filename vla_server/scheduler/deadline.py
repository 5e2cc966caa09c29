"""Control deadlines: how long the work left in a request will take, from measured step times.

A frame that can no longer make its control deadline is worth nothing, so a request that cannot
finish in time is ended early (finish reason `deadline`) and its KV freed for requests that can.

A robot's actions are due one control period apart, the chunk's last at the request's deadline.
A request that names its period (`control_period_ms`) and streams its actions (one per
`tokens_per_action` tokens) lives while one of its actions can still be on time: the next one
or the last (the lateness of the actions in between changes linearly, so one of those two is
the earliest). A partial chunk is still a chunk: a robot on slow compute executes the actions
that come in time rather than none. A chunk that comes whole at the end is on time while its
last action is.
"""

from __future__ import annotations

import time

from vla_server.io_struct import FinishDeadline
from vla_server.scheduler.req import Req

EMA = 0.2  # weight of the newest measurement


def finish_deadline(missed_by_s: float, predicted: bool) -> FinishDeadline:
    how = "cannot finish before" if predicted else "missed"
    return FinishDeadline(f"{how} its deadline ({missed_by_s * 1e3:+.1f} ms)")


class StepTimer:
    """Moving averages of the decode step time, the per-token cost of prefill and the time of
    a denoising pass (an action head that integrates a chunk)."""

    def __init__(self) -> None:
        self.decode_step_s = 0.0
        self.prefill_token_s = 0.0
        self.denoise_step_s = 0.0

    def observe(self, num_tokens: int, is_decode: bool, seconds: float) -> None:
        if is_decode:
            self.decode_step_s = _ema(self.decode_step_s, seconds)
        elif num_tokens:
            self.prefill_token_s = _ema(self.prefill_token_s, seconds / num_tokens)

    def observe_denoise(self, seconds: float) -> None:
        self.denoise_step_s = _ema(self.denoise_step_s, seconds)

    def time_left_s(self, req: Req) -> float:
        """Predicted time until `req` finishes if it ran from now."""
        prefill = max(req.num_new_tokens - 1, 0) * self.prefill_token_s
        denoise = 0.0 if req.denoise is None else req.denoise.steps_left * self.denoise_step_s
        return prefill + req.remaining_new_tokens() * self.decode_step_s + denoise

    def check(self, req: Req, now: float | None = None) -> FinishDeadline | None:
        """A deadline finish reason if `req` has missed, or will miss, its deadline."""
        if req.deadline is None:
            return None
        now = time.time() if now is None else now
        if now > req.deadline:
            return finish_deadline(now - req.deadline, predicted=False)
        eta = now + self.time_left_s(req)
        if eta > req.deadline and not self._next_action_on_time(req, now):
            return finish_deadline(eta - req.deadline, predicted=True)
        return None

    def _next_action_on_time(self, req: Req, now: float) -> bool:
        """Whether the next action still to stream can make its own due time."""
        wire, per = req.wire, req.wire.tokens_per_action
        if not (wire.action_period > 0 and per > 0 and req.num_actions > 0):
            return False
        produced = len(req.output_ids) + req.pending_tokens
        index = produced // per  # the next action's
        if index >= req.num_actions:
            return False
        assert req.deadline is not None
        due = req.deadline - (req.num_actions - 1 - index) * wire.action_period
        prefill = max(req.num_new_tokens - 1, 0) * self.prefill_token_s
        eta = now + prefill + ((index + 1) * per - produced) * self.decode_step_s
        return eta <= due


def _ema(prev: float, x: float) -> float:
    return x if prev == 0.0 else (1 - EMA) * prev + EMA * x
