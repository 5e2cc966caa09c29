"""Building the next batch: every decoding request advances one token, prefilling requests get
chunks of the prefill budget, and waiting requests are admitted in queue order — preempting
less important running requests when a more important one does not fit.

A step mixes decode tokens and prefill chunks in one forward, so a long new prompt (chunked)
costs a running action stream a little per step instead of stalling it.
"""

from __future__ import annotations

from collections.abc import Callable

from vla_server.scheduler.batch_runner import prompt_span
from vla_server.scheduler.interfaces import Clock
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


class StepBuilder:
    def __init__(
        self,
        policy: PolicyConfig,
        state: SchedState,
        kv: KVCacheManager,
        sessions: SessionController,
        drain: Callable[[], None],
        clock: Clock,
    ):
        self.policy = policy
        self.state = state
        self.kv = kv
        self.sessions = sessions
        self.drain = drain  # applies the batch in flight (its requests may then be changed)
        self.clock = clock

    def build(self) -> ScheduledBatch | None:
        s, kv = self.state, self.kv
        plan: list[tuple[Req, int]] = []
        adder = PrefillAdder(
            self.policy, s.reserve_ratio, kv.available_tokens(), kv.free_rows(), s.running
        )
        for req in s.running:
            need = req.num_new_tokens
            if req.finished or need <= 0 or (req.is_decoding and req.remaining_new_tokens() == 0):
                continue
            n = 1 if need == 1 else adder.take_chunk(need)
            if n:
                plan.append((req, n))
        plan += self._admit(adder)
        if not plan:
            return None
        return self._allocate(plan)

    def _admit(self, adder: PrefillAdder) -> list[tuple[Req, int]]:
        s, kv = self.state, self.kv
        admitted: list[tuple[Req, int]] = []
        for req in sorted(s.waiting, key=self.policy.queue_key):
            if adder.chunk_budget <= 0:
                break
            prefix, node = kv.match(req)
            slots, tokens = adder.shortfall(req, int(prefix.numel()))
            if tokens:
                # Session pins are bounded by --max-session-held-tokens, but they must not keep
                # out a request that would fit without them: the oldest sessions lose theirs.
                adder.token_budget += self.sessions.unpin_oldest_for(tokens)
                slots, tokens = adder.shortfall(req, int(prefix.numel()))
            if slots or tokens:
                victims = choose_victims(self.policy, req, s.running, slots, tokens)
                if victims is None:
                    break  # strict queue order: nothing behind it jumps the queue
                self.drain()
                for v in victims:
                    s.retract(v, kv)
                    adder.give_back(v)
                prefix, node = kv.match(req)
            s.waiting.remove(req)
            kv.admit(req, prefix, node)
            adder.admit(req, req.kv_len)
            s.running.append(req)
            admitted.append((req, adder.take_chunk(req.num_new_tokens)))
        return admitted

    def _allocate(self, plan: list[tuple[Req, int]]) -> ScheduledBatch | None:
        s, kv = self.state, self.kv
        # A drain may have finished some, a preemption may have retracted some.
        plan = [(r, n) for r, n in plan if r in s.running and not r.finished]
        if not plan:
            return None
        n_tokens = sum(n for _, n in plan)
        slots = kv.alloc(n_tokens)
        while slots is None:
            if s.inflight is not None:
                # The batch in flight may finish requests and free their KV: wait for it first.
                self.drain()
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
        return self._make_batch(plan, slots)

    def _make_batch(self, plan: list[tuple[Req, int]], slots: object) -> ScheduledBatch:
        s = self.state
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
            prev=s.inflight[0] if s.inflight is not None else None,
        )
        for req, n in plan:
            fill = req.fill_ids
            toks = fill[req.kv_len : req.kv_len + n]
            if len(toks) < n:
                toks.append(PENDING)  # the token the in-flight batch is sampling for it
            span, targets = prompt_span(req, req.kv_len, n)
            sample = req.kv_len + n == req.seq_len
            batch.reqs.append(req)
            batch.tokens.append(toks)
            batch.prefix_lens.append(req.kv_len)
            batch.rows.append(req.req_pool_idx)  # type: ignore[arg-type]
            batch.sample.append(sample)
            batch.prompt_spans.append(span)
            batch.prompt_targets.append(targets)
            req.kv_len += n
            req.inflight += 1
            req.pending_tokens += int(sample)
            if req.queue_time is None:
                req.queue_time = now - req.arrival_time
                req.queue_steps = s.step_count - req.arrival_step
        return batch
