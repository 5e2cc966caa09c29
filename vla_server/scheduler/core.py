"""The scheduling core: a plain object that owns the queues and applies the rules, built from
explicit parts (a KV manager, a runner, an output sink, a clock). No sockets, no threads of its
own: the process shell feeds it messages and calls `step()`; a unit test does the same with a
fake runner. See docs/architecture.md.

One step: end what must end (aborts, deadlines; idle sessions at most once a second) -> build
the next batch (decode steps of running requests plus prefill chunks of admitted ones) -> launch
it -> apply the previous batch's result while this one runs (overlap; without overlap, apply
this one's at once) -> stream outputs to the sink.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Executor, Future
from typing import Any

from vla_server.config import SchedulerConfig
from vla_server.io_struct import AbortReq, RpcReply, SchedulerStats, TokenizedGenerateReqInput
from vla_server.policies.base import HeadSpec
from vla_server.scheduler.control import SchedulerControl
from vla_server.scheduler.deadline import StepTimer
from vla_server.scheduler.finish_check import FinishChecker
from vla_server.scheduler.image_embedder import ImageEmbedder
from vla_server.scheduler.intake import Intake
from vla_server.scheduler.interfaces import Clock, OutputSink, Runner, SystemClock
from vla_server.scheduler.isolation import Isolation
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.output_streamer import OutputStream
from vla_server.scheduler.policy import PolicyConfig
from vla_server.scheduler.req import Req
from vla_server.scheduler.result_processor import ResultProcessor
from vla_server.scheduler.schedule_batch import BatchResult, ScheduledBatch
from vla_server.scheduler.sessions import SessionController
from vla_server.scheduler.state import SchedState
from vla_server.scheduler.step_builder import StepBuilder
from vla_server.scheduler.step_cost import StepCostModel

SESSION_REAP_INTERVAL_S = 1.0
# With only the background lane busy, how long the loop waits for it before it looks at the
# sockets again: a new request waits at most this long to be seen.
BACKGROUND_POLL_S = 0.001


class SchedulerCore:
    def __init__(
        self,
        cfg: SchedulerConfig,
        kv: KVCacheManager,
        runner: Runner,
        sink: OutputSink,
        *,
        sessions: SessionController,
        finish_checker: FinishChecker,
        context_len: int,
        head: HeadSpec | None = None,
        prefix_lm: bool = False,
        model_counters: Callable[[], dict[str, Any]] | None = None,
        embedder: ImageEmbedder | None = None,
        clock: Clock | None = None,
        worker: Executor | None = None,
        background: Executor | None = None,
    ):
        """`worker` runs each batch (the model worker thread); without one a batch runs inline
        when launched, and with overlap its result is still applied one step later.
        `background`: the background lane's worker (priority isolation, see isolation.py)."""
        self.policy = PolicyConfig.from_config(cfg)
        self.kv = kv
        self.runner = runner
        self.sessions = sessions
        self.embedder = embedder
        self.clock = clock or SystemClock()
        self.worker = worker
        self.background = background
        self.overlap = not cfg.disable_overlap_schedule
        self.state = SchedState(reserve_ratio=self.policy.reserve_ratio)
        self.timer = StepTimer()
        self.step_cost = StepCostModel()
        isolation = Isolation.from_config(cfg, self.policy, self.step_cost, background is not None)
        protects = None if isolation is None else isolation.protects
        self.outputs = OutputStream(sink, self.stats, sessions, cfg.stream_interval, protects)
        self.intake = Intake(
            cfg, self.policy, self.state, sessions, self.outputs, runner.generator_for, self.clock,
            kv_tokens=kv.total_tokens, context_len=context_len, head=head,
            prefix_lm=prefix_lm,
        )  # fmt: skip
        self.builder = StepBuilder(
            self.policy, self.state, kv, sessions, self.drain, self.clock, isolation
        )
        self.results = ResultProcessor(
            self.state, kv, sessions, finish_checker, self.timer, self.step_cost, self.outputs
        )
        self.control = SchedulerControl(
            self.state, kv, sessions, runner.update_weights_from_disk, embedder, self.drain,
            self._abort_all, self.step_cost, model_counters,
            None if isolation is None else isolation.rhythm.period,
        )  # fmt: skip
        self._sessions_reaped_at = self.clock.monotonic()

    # ---- messages ----------------------------------------------------------------------------

    def handle_generate(self, msg: TokenizedGenerateReqInput) -> None:
        self.intake.generate(msg)

    def handle_abort(self, msg: AbortReq) -> None:
        self.intake.abort(msg)

    def handle_control(self, msg: object) -> RpcReply:
        return self.control.handle(msg)

    def _abort_all(self) -> None:
        self.intake.abort(AbortReq(abort_all=True))

    # ---- steps -------------------------------------------------------------------------------

    def step(self) -> bool:
        """One iteration; False when there is nothing to do until a message arrives."""
        self.reap()
        s = self.state
        self._collect_background(wait=False)
        batch = None if s.paused else self.builder.build()
        if batch is not None:
            s.step_count += 1
            future = self._launch(batch)
            if not self.overlap:
                self._await(future)
                self.results.process(batch, future)
                self._launch_background()
                return True
        # Overlap: the previous batch's result is applied while this one runs.
        if s.inflight is not None:
            self._await(s.inflight[1])
            self.results.process(*s.inflight)
        s.inflight = None if batch is None else (batch, future)
        self._launch_background()
        if batch is None and s.background is not None:
            # Only the background lane is busy: look at the sockets again soon, not at once.
            self._collect_background(wait=True)
            return True
        return batch is not None or (not s.paused and bool(s.running))

    def _launch(self, batch: ScheduledBatch) -> Future[BatchResult]:
        if self.worker is not None:
            return self.worker.submit(self.runner.run, batch)
        future: Future[BatchResult] = Future()
        future.set_result(self.runner.run(batch))
        return future

    def _launch_background(self) -> None:
        batch = None if self.state.paused else self.builder.build_background()
        if batch is not None:
            assert self.background is not None
            future = self.background.submit(self.runner.run_background, batch)
            self.state.background = (batch, future)

    def _await(self, future: Future[BatchResult]) -> None:
        """Wait for a main-lane batch, keeping the background lane busy meanwhile: each of its
        steps that ends is applied and followed by the next at once."""
        while self.state.background is not None and not future.done():
            futures.wait([future, self.state.background[1]], return_when=futures.FIRST_COMPLETED)
            self._collect_background(wait=False)
            if not future.done():
                self._launch_background()

    def _collect_background(self, wait: bool) -> None:
        """Apply the background lane's result once it is there (`wait`: for up to a moment)."""
        bg = self.state.background
        if bg is None:
            return
        if wait:
            futures.wait([bg[1]], timeout=BACKGROUND_POLL_S)
        if bg[1].done():
            self.state.background = None
            self.results.process(*bg, background=True)

    def drain(self, reqs: list[Req] | None = None) -> None:
        """Apply the result of the batch in flight, and of the background lane's when it holds
        any of `reqs` (None: in any case), before changing the KV of requests they hold."""
        inflight = self.state.inflight
        if inflight is not None:
            self.state.inflight = None
            self.results.process(*inflight)
        bg = self.state.background
        if bg is not None and (reqs is None or any(r.in_background for r in reqs)):
            self.state.background = None
            self.results.process(*bg, background=True)

    def reap(self) -> None:
        """End aborted requests and those that can no longer make their deadline; close
        sessions idle past their timeout (at most once a second)."""
        s, clock = self.state, self.clock
        if clock.monotonic() - self._sessions_reaped_at > SESSION_REAP_INTERVAL_S:
            self.sessions.reap()
            self._sessions_reaped_at = clock.monotonic()
        now = clock.time()
        late = [(r, self.timer.check(r, now)) for r in s.waiting if r.deadline is not None]
        late = [(r, why) for r, why in late if why is not None]
        for r, why in late:
            s.waiting.remove(r)
            r.finished_reason = why
        ended = [r for r, _ in late]
        for r in s.running:
            if r.finished:
                continue
            why = r.to_abort or self.timer.check(r, now)
            if why is not None:
                r.finished_reason = why
                ended.append(r)
        self.results.finish(ended)

    # ---- state -------------------------------------------------------------------------------

    def is_idle(self) -> bool:
        s = self.state
        return not s.running and not s.waiting and s.inflight is None and s.background is None

    def stats(self) -> SchedulerStats:
        tree, embedder = self.kv.tree, self.embedder
        return SchedulerStats(
            num_running_reqs=len(self.state.running),
            num_waiting_reqs=len(self.state.waiting),
            kv_used_tokens=self.kv.used_tokens(),
            kv_total_tokens=self.kv.total_tokens,
            mm_cache_hits=embedder.hits if embedder else 0,
            mm_cache_misses=embedder.misses if embedder else 0,
            kv_cached_tokens=tree.evictable_size(),
            prefix_hit_tokens=tree.stats.hit_tokens,
            prefix_queried_tokens=tree.stats.queried_tokens,
            num_retractions=self.state.num_retractions,
            mm_prefix_cache_images=embedder.prefix_cached if embedder else 0,
            held_steps=self.state.held_steps,
        )
