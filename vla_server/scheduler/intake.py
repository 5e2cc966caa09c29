"""New requests into the waiting queue, and aborts.

A request is refused (finish reason `abort`, with the HTTP status and the field it is about) when
it can never run: a prompt beyond the context, more KV than the pool holds, actions on a model
without an action head, guidance that does not fit the head, a session error. With `supersede`,
the newest frame of a session replaces its stale waiting ones before the queue bound is
checked, so a full queue never keeps out the newest frame. With the bound reached, a
better-ranked newcomer evicts the worst queued request; anyone else gets a 503.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from vla_server.config import SchedulerConfig
from vla_server.io_struct import AbortReq, FinishSuperseded, TokenizedGenerateReqInput, abort
from vla_server.policies.base import Denoise, HeadSpec
from vla_server.scheduler.denoise_state import DenoiseState
from vla_server.scheduler.interfaces import Clock
from vla_server.scheduler.output_streamer import OutputStream
from vla_server.scheduler.policy import PolicyConfig
from vla_server.scheduler.req import Req
from vla_server.scheduler.sessions import SessionController, SessionError
from vla_server.scheduler.state import SchedState


class Intake:
    def __init__(
        self,
        cfg: SchedulerConfig,
        policy: PolicyConfig,
        state: SchedState,
        sessions: SessionController,
        outputs: OutputStream,
        generator_for: Callable[[int | None], torch.Generator | None],
        clock: Clock,
        *,
        kv_tokens: int,
        context_len: int,
        head: HeadSpec | None,
        prefix_lm: bool = False,
    ):
        self.max_queued = cfg.max_queued_requests
        self.policy = policy
        self.state = state
        self.sessions = sessions
        self.outputs = outputs
        self.generator_for = generator_for  # a seeded request's own random stream
        self.clock = clock
        self.kv_tokens = kv_tokens
        self.context_len = context_len
        self.head = head  # what an action request runs (None: the model has no actions)
        self.prefix_lm = prefix_lm  # the model attends each prompt's prefix bidirectionally

    def generate(self, msg: TokenizedGenerateReqInput) -> None:
        req = Req.from_wire(msg)
        req.arrival_time = req.last_step_at = self.clock.monotonic()
        req.arrival_step = self.state.step_count
        problem = (
            self._prefix_problem(msg) or self._state_problem(msg) or self._guidance_problem(msg)
        )
        if problem is not None:
            self.reject(req, *problem)
            return
        stale = self._superseded_by(req)
        try:
            # The turns this one supersedes are no parents: it continues from before them.
            turn = (
                None
                if msg.session_params is None
                else self.sessions.rebuild(req, msg.session_params, {r.rid for r in stale})
            )
        except SessionError as e:
            self.reject(req, str(e), field=e.field)
            return
        if not self._fits(req):
            return
        if req.num_actions:
            if self.head is None:
                self.reject(req, "this model has no action head", field="num_actions")
                return
            if isinstance(self.head, Denoise):
                req.denoise = DenoiseState.create(self.head, msg)
            else:
                req.vocab_mask = self.head.mask
        self._supersede(stale)  # first: the stale frames must not hold a queue slot
        if not self._queue_admits(req):
            return
        if turn is not None:
            self.sessions.add_turn(turn)
        req.generator = self.generator_for(req.sampling_params.random_seed)
        self.state.waiting.append(req)

    def abort(self, msg: AbortReq) -> None:
        """Waiting requests end now; running ones at the next step (a batch may hold them)."""

        def hit(r: Req) -> bool:
            return msg.abort_all or r.rid == msg.rid

        state = self.state
        gone = [r for r in state.waiting if hit(r)]
        if gone:
            state.waiting = [r for r in state.waiting if not hit(r)]
            for r in gone:
                r.finished_reason = abort()
            self.outputs.send(gone)
        for r in state.running:
            if hit(r) and not r.finished:
                r.to_abort = abort()

    def reject(
        self, req: Req, message: str, status_code: int = 400, field: str | None = None
    ) -> None:
        req.finished_reason = abort(message, status_code=status_code, field=field)
        self.outputs.send([req])

    def _fits(self, req: Req) -> bool:
        n_in = len(req.origin_input_ids)
        if n_in == 0 or n_in >= self.context_len:
            self.reject(req, f"prompt has {n_in} tokens; the context length is {self.context_len}")
            return False
        params = req.sampling_params
        params.max_new_tokens = min(params.max_new_tokens, self.context_len - n_in)
        if n_in + params.max_new_tokens > self.kv_tokens:
            self.reject(
                req,
                f"request needs {n_in + params.max_new_tokens} KV tokens (prompt {n_in} + "
                f"max_new_tokens {params.max_new_tokens}); the KV pool holds "
                f"{self.kv_tokens} (--max-total-tokens)",
            )
            return False
        return True

    def _prefix_problem(self, msg: TokenizedGenerateReqInput) -> tuple[str, int, str] | None:
        """Why a request's prefix-LM fields do not fit the model, or None."""
        n = len(msg.input_ids)
        if not self.prefix_lm:
            if msg.prefix_lm_len or msg.position_shift:
                return "this model has no bidirectional prefix", 400, "prefix_lm_len"
            return None
        if not 0 < msg.prefix_lm_len <= n:
            return f"must be in [1, {n}] (the prompt's length)", 400, "prefix_lm_len"
        if msg.session_params is not None:
            # A turn's prompt would extend the previous prefix, whose KV then no longer holds.
            return "sessions cannot continue a prefix-LM prompt", 400, "session_params"
        return None

    def _state_problem(self, msg: TokenizedGenerateReqInput) -> tuple[str, int, str] | None:
        """Why a request's state token does not fit its prompt, or None."""
        pos = msg.state_position
        if pos is None:
            return None
        if msg.state is None:
            return "a state position needs the state", 400, "state"
        if not 0 <= pos < len(msg.input_ids):
            return f"must be in [0, {len(msg.input_ids)}) (the prompt)", 400, "state_position"
        if not (isinstance(self.head, Denoise) and self.head.state_token):
            return "this model has no state token in its prompt", 400, "state_position"
        return None

    def _guidance_problem(self, msg: TokenizedGenerateReqInput) -> tuple[str, int, str] | None:
        """Why a request's real-time chunking guidance does not fit the head, or None (the
        front end checked the fields; this guards the wire)."""
        g = msg.guidance
        if g is None:
            return None
        head = self.head
        if not (isinstance(head, Denoise) and msg.num_actions):
            return "only a denoised action chunk takes guidance", 400, "prev_chunk"
        shape = g.prev_chunk.shape
        if len(shape) != 2 or not 1 <= shape[0] <= head.chunk_size or shape[1] != head.width:
            return f"must be [1..{head.chunk_size}, {head.width}] on the wire", 400, "prev_chunk"
        if not 0 <= g.inference_delay <= min(g.execution_horizon, shape[0]):
            reason = "must be in [0, min(execution_horizon, prev_chunk's length)]"
            return reason, 400, "inference_delay"
        if not (math.isfinite(g.rtc.max_guidance_weight) and g.rtc.max_guidance_weight > 0):
            return "must be a finite number > 0", 400, "rtc.max_guidance_weight"
        return None

    def _queue_admits(self, req: Req) -> bool:
        limit, waiting = self.max_queued, self.state.waiting
        if limit is None or len(waiting) < limit:
            return True
        worst = max(waiting, key=self.policy.queue_key) if self.policy.priority_enabled else None
        if worst is not None and self.policy.rank(req) < self.policy.rank(worst):
            waiting.remove(worst)
            worst.finished_reason = abort("aborted by a higher priority request", 503)
            self.outputs.send([worst])
            return True
        self.reject(req, f"the request queue is full ({limit} waiting)", 503)
        return False

    def _superseded_by(self, req: Req) -> list[Req]:
        """Latest frame wins: with `supersede`, the session's older waiting requests."""
        if not req.supersede or req.session_id is None:
            return []
        return [r for r in self.state.waiting if r.session_id == req.session_id]

    def _supersede(self, old: list[Req]) -> None:
        for r in old:
            self.state.waiting.remove(r)
            r.finished_reason = FinishSuperseded()
        self.outputs.send(old)
