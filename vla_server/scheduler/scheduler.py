"""The scheduler process: owns the queues, the KV memory and the model; runs the batch loop.

Loop: ingest requests (non-blocking drain of the request ring and the rpc channel) -> end what
can no longer make its deadline -> build the next batch (decode steps of running requests plus
prefill chunks of admitted ones) -> launch it on the model worker thread -> process the previous
batch's result while this one runs (overlap) -> stream outputs to the detokenizer.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import torch
import zmq

from vla_server.config import PortArgs, ServerArgs, default_torch_threads
from vla_server.io_struct import (
    AbortReq,
    BatchTokenizedGenerateReqInput,
    SchedulerStats,
    TokenizedGenerateReqInput,
    decode_or_drop,
    encode,
    rpc_request_decoder,
    scheduler_input_decoder,
)
from vla_server.model.attention.registry import resolve_backend_name
from vla_server.model.model_runner import ModelRunner
from vla_server.multimodal.action_tokenizer import ActionTokenizer
from vla_server.process_utils import (
    become_child_process,
    configure_logging,
    parent_is_gone,
    zmq_socket,
)
from vla_server.scheduler.batch_runner import BatchRunner
from vla_server.scheduler.control import SchedulerControl
from vla_server.scheduler.deadline import StepTimer
from vla_server.scheduler.finish_check import FinishChecker
from vla_server.scheduler.image_embedder import ImageEmbedder
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.output_streamer import build_output, should_send
from vla_server.scheduler.policy import PolicyConfig
from vla_server.scheduler.req import Req, finish_abort
from vla_server.scheduler.result_processor import ResultProcessor
from vla_server.scheduler.schedule_batch import ScheduledBatch
from vla_server.scheduler.sessions import SessionController, SessionError
from vla_server.scheduler.step_builder import StepBuilder

logger = logging.getLogger(__name__)

SESSION_REAP_INTERVAL_S = 1.0


def build_model_runner(args: ServerArgs) -> ModelRunner:
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return ModelRunner(
        args.model_path,
        device=device,
        dtype=None if args.dtype == "auto" else args.dtype,
        max_total_tokens=args.max_total_tokens,
        mem_fraction=args.mem_fraction_static,
        max_running_requests=args.max_running_requests,
        context_len=args.context_length,
        attention_backend=args.attention_backend,
    )


def policy_config(args: ServerArgs) -> PolicyConfig:
    chunk = args.chunked_prefill_size
    return PolicyConfig(
        max_running_requests=args.max_running_requests,
        chunked_prefill_size=chunk if chunk and chunk > 0 else None,
        reserve_ratio=args.decode_reserve_ratio,
        priority_enabled=args.enable_priority_scheduling,
        low_values_first=args.schedule_low_priority_values_first,
        preemption_threshold=args.priority_scheduling_preemption_threshold,
        preemption_enabled=not args.disable_priority_preemption,
    )


class Scheduler:
    def __init__(self, server_args: ServerArgs, port_args: PortArgs):
        from transformers import AutoTokenizer

        self.args = server_args
        torch.set_num_threads(server_args.torch_num_threads or default_torch_threads())
        self.runner = build_model_runner(server_args)
        self.tokenizer = AutoTokenizer.from_pretrained(server_args.resolved_tokenizer_path())
        self.kv = KVCacheManager(
            self.runner.req_to_token_pool, self.runner.kv_pool, server_args.disable_radix_cache
        )
        self.embedder = (
            ImageEmbedder(self.runner, server_args.mm_embedding_cache_mb)
            if self.runner.vision
            else None
        )
        self.batch_runner = BatchRunner(self.runner, server_args.random_seed, self.embedder)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-worker")
        self.overlap = not server_args.disable_overlap_schedule
        self.finish_checker = FinishChecker(self.tokenizer, set(self.runner.config.eos_token_ids))
        self.context_len = self.runner.context_len
        self.policy = policy_config(server_args)
        self.timer = StepTimer()
        self.sessions = SessionController(
            self.kv.tree, server_args.max_session_held_tokens, self.tokenizer.bos_token_id
        )
        self.action_mask = self._action_mask()
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.inflight: tuple[ScheduledBatch, Future] | None = None
        self.paused = False
        self.num_retractions = 0
        self.step_count = 0  # batches launched
        self._sessions_reaped_at = time.monotonic()
        self.reserve_ratio = self.policy.reserve_ratio
        self.builder = StepBuilder(self)
        self.results = ResultProcessor(self)
        self.control = SchedulerControl(self)
        self._init_sockets(port_args)

    def _init_sockets(self, port_args: PortArgs) -> None:
        self.zmq_ctx = zmq.Context(2)
        self.recv_sock = zmq_socket(
            self.zmq_ctx, zmq.PULL, port_args.scheduler_input_ipc_name, bind=True
        )
        self.rpc_sock = zmq_socket(self.zmq_ctx, zmq.DEALER, port_args.rpc_ipc_name, bind=False)
        self.detok_sock = zmq_socket(
            self.zmq_ctx, zmq.PUSH, port_args.detokenizer_ipc_name, bind=False
        )
        self.poller = zmq.Poller()
        self.poller.register(self.recv_sock, zmq.POLLIN)
        self.poller.register(self.rpc_sock, zmq.POLLIN)
        self.handlers: dict[type, Callable[[Any], None]] = {
            TokenizedGenerateReqInput: self.handle_generate,
            BatchTokenizedGenerateReqInput: lambda b: [self.handle_generate(r) for r in b.batch],
            AbortReq: self.handle_abort,
        }

    def _action_mask(self) -> torch.Tensor | None:
        tok = self.tokenizer
        actions = ActionTokenizer.from_folder(
            self.args.model_path or "",
            tok.vocab_size,
            reserved_token_ids=tok.all_special_ids,
            total_vocab_size=len(tok),
        )
        return None if actions is None else actions.allowed_mask(self.runner.vocab_size)

    def init_info(self) -> dict[str, Any]:
        cfg = self.runner.config
        return {
            "status": "ready",
            "max_total_num_tokens": self.kv.total_tokens,
            "context_len": self.context_len,
            "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.hidden_size,
            "architectures": [cfg.architecture],
            "device": str(self.runner.device),
            "dtype": str(self.runner.dtype).removeprefix("torch."),
            "image_token_id": cfg.image_token_id,
            "num_image_tokens": self.runner.vision.num_image_tokens if self.runner.vision else 0,
            "attention_backend": resolve_backend_name(
                self.args.attention_backend, self.runner.device
            ),
        }

    # ---- loop --------------------------------------------------------------------------------

    def event_loop(self, parent_pid: int) -> None:
        while True:
            self.ingest()
            self.reap()
            batch = None if self.paused else self.builder.build()
            if batch is not None:
                self.step_count += 1
                future = self.worker.submit(self.batch_runner.run, batch)
                if not self.overlap:
                    self.results.process(batch, future)
                    continue
            # Overlap: the previous batch's result is processed while this one runs.
            if self.inflight is not None:
                self.results.process(*self.inflight)
            self.inflight = (batch, future) if batch is not None else None
            if batch is None and self.inflight is None and (self.paused or not self.running):
                # Wake for a message; with waiting requests (deadlines) look again soon.
                timeout = 50 if self.waiting else 1000
                if not self.poller.poll(timeout) and parent_is_gone(parent_pid):
                    return

    def drain(self) -> None:
        """Finish the in-flight batch before changing the KV of requests it may contain."""
        if self.inflight is not None:
            batch, future = self.inflight
            self.inflight = None
            self.results.process(batch, future)

    def ingest(self) -> None:
        for sock, decoder in (
            (self.recv_sock, scheduler_input_decoder),
            (self.rpc_sock, rpc_request_decoder),
        ):
            while True:
                try:
                    raw = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = decode_or_drop(decoder, raw, "scheduler")
                if msg is None:
                    continue
                if sock is self.rpc_sock:
                    self.rpc_sock.send(encode(self.control.handle(msg)))
                else:
                    self.handlers[type(msg)](msg)

    # ---- requests ----------------------------------------------------------------------------

    def handle_generate(self, msg: TokenizedGenerateReqInput) -> None:
        req = Req.from_wire(msg)
        req.arrival_step = self.step_count
        if req.priority == 0 and msg.priority is None:
            req.priority = self.args.default_priority_value
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
            if self.action_mask is None:
                self.reject(req, "this model has no action tokenizer")
                return
            req.vocab_mask = self.action_mask
        self.supersede(stale)  # first: the stale frames must not hold a queue slot
        if not self._queue_admits(req):
            return
        if turn is not None:
            self.sessions.add_turn(turn)
        req.generator = self.batch_runner.generator_for(req.sampling_params.seed)
        self.waiting.append(req)

    def _fits(self, req: Req) -> bool:
        n_in = len(req.origin_input_ids)
        if n_in == 0 or n_in >= self.context_len:
            self.reject(req, f"prompt has {n_in} tokens; the context length is {self.context_len}")
            return False
        params = req.sampling_params
        params.max_new_tokens = min(params.max_new_tokens, self.context_len - n_in)
        if n_in + params.max_new_tokens > self.kv.total_tokens:
            self.reject(
                req,
                f"request needs {n_in + params.max_new_tokens} KV tokens (prompt {n_in} + "
                f"max_new_tokens {params.max_new_tokens}); the KV pool holds "
                f"{self.kv.total_tokens} (--max-total-tokens)",
            )
            return False
        return True

    def _queue_admits(self, req: Req) -> bool:
        limit = self.args.max_queued_requests
        if limit is None or len(self.waiting) < limit:
            return True
        worst = (
            max(self.waiting, key=self.policy.queue_key) if self.policy.priority_enabled else None
        )
        if worst is not None and self.policy.rank(req) < self.policy.rank(worst):
            self.waiting.remove(worst)
            worst.finished_reason = finish_abort("aborted by a higher priority request", 503)
            self.stream_output([worst])
            return True
        self.reject(req, f"the request queue is full ({limit} waiting)", 503)
        return False

    def _superseded_by(self, req: Req) -> list[Req]:
        """Latest frame wins: with `supersede`, the session's older waiting requests."""
        if not req.supersede or req.session_id is None:
            return []
        return [r for r in self.waiting if r.session_id == req.session_id]

    def supersede(self, old: list[Req]) -> None:
        for r in old:
            self.waiting.remove(r)
            r.finished_reason = {
                "type": "superseded",
                "message": "a newer request of the session arrived",
            }
        self.stream_output(old)

    def reject(
        self, req: Req, message: str, status_code: int = 400, field: str | None = None
    ) -> None:
        req.finished_reason = finish_abort(message, status_code=status_code, field=field)
        self.stream_output([req])

    def handle_abort(self, msg: AbortReq) -> None:
        def hit(r: Req) -> bool:
            return msg.abort_all or r.rid == msg.rid

        gone = [r for r in self.waiting if hit(r)]
        if gone:
            self.waiting = [r for r in self.waiting if not hit(r)]
            for r in gone:
                r.finished_reason = finish_abort()
            self.stream_output(gone)
        for r in self.running:
            if hit(r) and not r.finished:
                r.to_abort = finish_abort()

    def reap(self) -> None:
        """End aborted requests and those that can no longer make their deadline; close
        sessions idle past their timeout (at most once a second)."""
        if time.monotonic() - self._sessions_reaped_at > SESSION_REAP_INTERVAL_S:
            self.sessions.reap()
            self._sessions_reaped_at = time.monotonic()
        now = time.time()
        late = [(r, self.timer.check(r, now)) for r in self.waiting if r.deadline is not None]
        late = [(r, why) for r, why in late if why is not None]
        for r, why in late:
            self.waiting.remove(r)
            r.finished_reason = why
        ended = [r for r, _ in late]
        for r in self.running:
            if r.finished:
                continue
            why = r.to_abort or self.timer.check(r, now)
            if why is not None:
                r.finished_reason = why
                ended.append(r)
        self.results.finish(ended)

    def retract(self, req: Req) -> None:
        """Preempt a running request: its KV goes to the radix cache (evictable), it re-queues
        with its output so far and is recomputed later, mostly from prefix hits."""
        assert req.inflight == 0, "drain before retracting"
        self.kv.release(req)
        self.running.remove(req)
        req.num_retractions += 1
        self.num_retractions += 1
        self.waiting.append(req)

    # ---- output ------------------------------------------------------------------------------

    def stats(self) -> SchedulerStats:
        tree = self.kv.tree
        return SchedulerStats(
            num_running_reqs=len(self.running),
            num_waiting_reqs=len(self.waiting),
            kv_used_tokens=self.kv.used_tokens(),
            kv_total_tokens=self.kv.total_tokens,
            mm_cache_hits=self.embedder.hits if self.embedder else 0,
            mm_cache_misses=self.embedder.misses if self.embedder else 0,
            kv_cached_tokens=tree.evictable_size(),
            prefix_hit_tokens=tree.stats.hit_tokens,
            prefix_queried_tokens=tree.stats.queried_tokens,
            num_retractions=self.num_retractions,
            mm_prefix_cache_images=self.embedder.prefix_cached if self.embedder else 0,
        )

    def stream_output(self, reqs: list[Req]) -> None:
        if not reqs:
            return
        for r in reqs:
            if r.finished and r.req_pool_idx is None and r.session_id is not None:
                self.sessions.end_unrun(r)
        self.detok_sock.send(encode(build_output(reqs, self.stats())))

    def send_ready_outputs(self, reqs: list[Req]) -> None:
        self.stream_output([r for r in reqs if should_send(r, self.args.stream_interval)])

    def is_idle(self) -> bool:
        return not self.running and not self.waiting and self.inflight is None


# The model worker thread and the scheduler thread hand the GIL back and forth every step;
# Python's default 5 ms switch interval would add up to that much to each step's latency.
GIL_SWITCH_INTERVAL_S = 0.0002


def run_scheduler_process(
    server_args: ServerArgs, port_args: PortArgs, ready_pipe: Connection, parent_pid: int
) -> None:
    become_child_process("vla-scheduler")
    configure_logging(server_args.log_level)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        scheduler = Scheduler(server_args, port_args)
    except Exception as e:
        logger.exception("scheduler failed to start")
        ready_pipe.send({"status": "error", "message": f"{type(e).__name__}: {e}"})
        sys.exit(1)
    ready_pipe.send(scheduler.init_info())
    ready_pipe.close()
    try:
        scheduler.event_loop(parent_pid)
    except Exception:
        logger.exception("scheduler crashed")
        sys.exit(1)
    os._exit(0)
