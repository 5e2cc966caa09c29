"""Building the next batch: every decoding request advances one token, prefilling requests get
chunks of the prefill budget, and waiting requests are admitted in queue order — preempting
less important running requests when a more important one does not fit.

A step mixes decode tokens and prefill chunks in one forward, so a long new prompt (chunked)
costs a running action stream a little per step instead of stalling it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vla_server.scheduler.batch_runner import prompt_span
from vla_server.scheduler.interfaces import Clock
from vla_server.scheduler.isolation import Gate, Isolation
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.policy import (
    PolicyConfig,
    PrefillAdder,
    choose_victims,
    retraction_order,
)
from vla_server.scheduler.req import Req
from vla_server.scheduler.schedule_batch import PENDING, ScheduledBatch
from vla_server.scheduler.sessions import SessionController
from vla_server.scheduler.state import SchedState

# After a retraction under KV pressure the reserve ratio rises by this, then decays per step.
RESERVE_STEP = 0.2
RESERVE_DECAY = 0.002


def _whole_prefix(req: Req, allowed: int) -> int:
    """An allowance that would cut a bidirectional prefix grows to its end (0 stays 0)."""
    return max(allowed, req.min_chunk) if allowed else 0


class StepBuilder:
    def __init__(
        self,
        policy: PolicyConfig,
        state: SchedState,
        kv: KVCacheManager,
        sessions: SessionController,
        drain: Callable[[list[Req] | None], None],
        clock: Clock,
        isolation: Isolation | None = None,
    ):
        self.policy = policy
        self.state = state
        self.kv = kv
        self.sessions = sessions
        # Applies the batches in flight that hold any of the given requests (None: all), so
        # those requests may then be changed.
        self.drain = drain
        self.gated = False  # the latest step was built through a gate (others were held)
        self.clock = clock
        self.isolation = isolation  # priority isolation, when --realtime-priority is set

    def build(self) -> ScheduledBatch | None:
        s, kv = self.state, self.kv
        s.num_held = 0
        adder = PrefillAdder(
            self.policy, s.reserve_ratio, kv.available_tokens(), kv.free_rows(), s.running
        )
        iso = self.isolation
        running = [r for r in s.running if not r.in_background]
        if iso is None or not iso.active(s):
            gate = None if iso is None else iso.reserve_gate(s, self.clock.monotonic())
            plan = self._advance(running, adder, gate)
            plan += self._admit(sorted(s.waiting, key=self.policy.queue_key), adder, gate)[0]
        else:
            # The protected requests first: their chunks do not wait behind anyone's.
            queue = sorted(s.waiting, key=lambda r: (not iso.protects(r), self.policy.queue_key(r)))
            first = [r for r in queue if iso.protects(r)]
            plan = self._advance([r for r in running if iso.protects(r)], adder, None)
            admitted, blocked = self._admit(first, adder, None)
            plan += admitted
            gate = iso.gate(s, sum(n for _, n in plan), self.clock.monotonic())
            plan += self._advance([r for r in running if not iso.protects(r)], adder, gate)
            if not blocked:  # strict queue order: nothing jumps a protected request
                plan += self._admit(queue[len(first) :], adder, gate)[0]
        self.gated = gate is not None
        batch = self._allocate([(r, n) for r, n in plan if n])  # n = 0: a prompt all cached
        ready = [r for r in running if _denoises_next(r)]
        if ready:
            alone = batch is None and self._alone(ready)
            empty = torch.empty(0, dtype=torch.int64)
            batch = batch or self._make_batch([], empty, self._in_flight())
            self._add_denoise(batch, ready, alone)
        return batch

    def _alone(self, ready: list[Req]) -> bool:
        """A lone robot's denoising request, with nothing else running or waiting: its steps
        run back to back in one batch (no scheduler iteration between them). Not one with a
        deadline, which is checked between steps (it ends early once it cannot make it)."""
        s = self.state
        lone = len(ready) == 1 and s.running == ready and ready[0].deadline is None
        return lone and not s.waiting and s.background is None

    def build_background(self) -> ScheduledBatch | None:
        """The background lane's next batch (see isolation.py): less important requests that the
        latest step's gate left out and no batch in flight holds, decoding ones first, then the
        longest waiting (the chunk budget goes to them in that order); None while the lane is
        busy, off, or nothing was left out, and while one it may take is in a main-lane batch
        (at most one step): it would miss the lane's step and wait for that step and its own."""
        s, kv, iso = self.state, self.kv, self.isolation
        if iso is None or not iso.lane or s.background is not None or not self.gated:
            return None
        if any(r.inflight and _lane_may_take(iso, r) for r in s.running):
            return None
        idle = [r for r in s.running if r.inflight == 0 and _lane_may_take(iso, r)]
        idle.sort(key=lambda r: (not r.is_decoding, r.last_step_at))
        adder = PrefillAdder(
            self.policy, s.reserve_ratio, kv.available_tokens(), kv.free_rows(), s.running
        )
        plan = self._advance(idle, adder, None)  # a step as without isolation: no gate
        if not any(iso.protects(r) for r in s.waiting):  # a protected one gets the room first
            queue = sorted(
                (r for r in s.waiting if _lane_may_take(iso, r)), key=self.policy.queue_key
            )
            plan += self._admit(queue, adder, None, preempt=False)[0]
        plan = [(r, n) for r, n in plan if n]
        slots = kv.alloc(sum(n for _, n in plan)) if plan else None
        if slots is None:  # nothing to run, or no room now: the lane waits for the next step
            return None
        batch = self._make_batch(plan, slots, prev=None)  # nothing of theirs is in flight
        for req in batch.reqs:
            req.in_background = True
        s.background_steps += 1
        return batch

    def _advance(
        self, reqs: list[Req], adder: PrefillAdder, gate: Gate | None
    ) -> list[tuple[Req, int]]:
        """The next decode token or prefill chunk of each running request in `reqs`."""
        plan: list[tuple[Req, int]] = []
        for req in reqs:
            need = req.num_new_tokens
            if req.finished or need <= 0 or (req.is_decoding and req.remaining_new_tokens() == 0):
                continue
            if gate is not None:
                need = _whole_prefix(req, gate.allow(req, need))
            n = 1 if need == 1 else adder.take_chunk(need, req.min_chunk)
            if n:
                plan.append((req, n))
        return plan

    def _admit(
        self, queue: list[Req], adder: PrefillAdder, gate: Gate | None, preempt: bool = True
    ) -> tuple[list[tuple[Req, int]], bool]:
        """Admit waiting requests of `queue` in its order; True with them when one that came
        before the rest could not be admitted (without `preempt`, when it would have had to
        preempt)."""
        s, kv = self.state, self.kv
        admitted: list[tuple[Req, int]] = []
        for req in queue:
            if adder.chunk_budget <= 0:
                return admitted, True
            if gate is not None and not gate.may_run(req):
                continue
            prefix, node = kv.match(req)
            slots, tokens = adder.shortfall(req, int(prefix.numel()))
            if tokens:
                # Session pins are bounded by --max-session-held-tokens, but they must not keep
                # out a request that would fit without them: the oldest sessions lose theirs.
                adder.token_budget += self.sessions.unpin_oldest_for(tokens)
                slots, tokens = adder.shortfall(req, int(prefix.numel()))
            if slots or tokens:
                victims = choose_victims(self.policy, req, s.running, slots, tokens)
                if victims is None or not preempt:
                    return admitted, True  # strict queue order: nothing behind it jumps the queue
                self.drain(victims)
                for v in victims:
                    if v in s.running:  # else its step in flight was its last: it is gone
                        s.retract(v, kv)
                    adder.give_back(v)
                prefix, node = kv.match(req)
            s.waiting.remove(req)
            kv.admit(req, prefix, node)
            adder.admit(req, req.kv_len)
            s.running.append(req)
            need = req.num_new_tokens
            if gate is not None:
                need = _whole_prefix(req, gate.allow(req, need))
            admitted.append((req, adder.take_chunk(need, req.min_chunk)))
        return admitted, False

    def _allocate(self, plan: list[tuple[Req, int]]) -> ScheduledBatch | None:
        s, kv = self.state, self.kv
        # A drain may have finished some, a preemption may have retracted some.
        plan = [(r, n) for r, n in plan if r in s.running and not r.finished]
        if not plan:
            return None
        n_tokens = sum(n for _, n in plan)
        slots = kv.alloc(n_tokens)
        while slots is None:
            if s.inflight is not None or s.background is not None:
                # A batch in flight may finish requests and free their KV: wait for it first.
                self.drain(None)
            elif not self.sessions.unpin_oldest_for(n_tokens - kv.available_tokens()):
                # KV pressure (reservations below 100 %) with no session pin left to give up (a
                # session's context is cheaper to recompute later than a running request):
                # retract the least important request, and reserve more for a while so it is
                # not re-admitted into the same squeeze.
                candidates = [r for r in retraction_order(self.policy, s.running) if not r.finished]
                if len(candidates) <= 1:
                    raise RuntimeError(f"KV pool exhausted: {n_tokens} slots needed")
                s.retract(candidates[0], kv)
                s.reserve_ratio = min(1.0, s.reserve_ratio + RESERVE_STEP)
            plan = [(r, n) for r, n in plan if r in s.running and not r.finished]
            if not plan:
                return None
            n_tokens = sum(n for _, n in plan)
            slots = kv.alloc(n_tokens)
        s.reserve_ratio = max(self.policy.reserve_ratio, s.reserve_ratio - RESERVE_DECAY)
        return self._make_batch(plan, slots, self._in_flight())

    def _in_flight(self) -> ScheduledBatch | None:
        """The main lane's batch in flight: its samples resolve the next batch's PENDING."""
        return self.state.inflight[0] if self.state.inflight is not None else None

    def _make_batch(
        self, plan: list[tuple[Req, int]], slots: object, prev: ScheduledBatch | None
    ) -> ScheduledBatch:
        """The batch of `plan`; its PENDING tokens resolve from `prev`."""
        now = self.clock.monotonic()
        batch = ScheduledBatch(
            reqs=[],
            tokens=[],
            prefix_lens=[],
            rows=[],
            slots=slots,  # type: ignore[arg-type]
            sample=[],
            prompt_spans=[],
            prompt_targets=[],
            prev=prev,
        )
        for req, n in plan:
            fill = req.fill_ids
            toks = fill[req.kv_len : req.kv_len + n]
            if len(toks) < n:
                toks.append(PENDING)  # the token the in-flight batch is sampling for it
            span, targets = prompt_span(req, req.kv_len, n)
            sample = req.kv_len + n == req.seq_len and req.denoise is None
            batch.reqs.append(req)
            batch.tokens.append(toks)
            batch.prefix_lens.append(req.kv_len)
            batch.rows.append(req.req_pool_idx)  # type: ignore[arg-type]
            batch.sample.append(sample)
            batch.prompt_spans.append(span)
            batch.prompt_targets.append(targets)
            req.kv_len += n
            req.pending_tokens += int(sample)
            self._stepped(req, now)
        return batch

    def _add_denoise(self, batch: ScheduledBatch, ready: list[Req], alone: bool) -> None:
        """One denoising pass for each request in `ready`, at its next step's time; `alone`:
        the one request's every step left."""
        now = self.clock.monotonic()
        chunks = [r.denoise for r in ready if r.denoise is not None]
        steps = chunks[0].num_steps - chunks[0].scheduled if alone else 1
        batch.denoise_steps = steps
        for req, chunk in zip(ready, chunks, strict=True):
            assert req.req_pool_idx is not None
            batch.denoise.append(req)
            batch.denoise_rows.append(req.req_pool_idx)
            batch.denoise_prefix_lens.append(req.kv_len)
            batch.denoise_times.append(chunk.times[chunk.scheduled : chunk.scheduled + steps])
            chunk.scheduled += steps
            self._stepped(req, now)

    def _stepped(self, req: Req, now: float) -> None:
        if req.held and req.gap_from is not None:
            s = self.state
            s.max_unprotected_gap_s = max(s.max_unprotected_gap_s, now - req.gap_from)
        req.held = False
        req.last_step_at = req.gap_from = now
        req.inflight += 1
        if req.queue_time is None:
            req.queue_time = now - req.arrival_time
            req.queue_steps = self.state.step_count - req.arrival_step


def _lane_may_take(iso: Isolation, req: Req) -> bool:
    """The background lane runs token steps of less important requests (denoising passes stay
    in the main lane, which batches them)."""
    return not iso.protects(req) and req.denoise is None and not req.finished


def _denoises_next(req: Req) -> bool:
    """A denoising request whose prompt K/V are in place and that has steps left to schedule."""
    chunk = req.denoise
    return chunk is not None and not req.finished and req.prompt_in_kv and chunk.to_schedule
