"""The scheduler process: owns the queues, the KV memory and the model; runs the batch loop.

Loop: ingest requests (non-blocking drain of the request ring and the rpc channel) -> choose
the next batch (prefill of admitted waiting requests wins, else one decode step of all running
requests) -> forward + sample -> finish checks -> stream outputs to the detokenizer.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch
import zmq

from vla_server.io_struct import (
    AbortReq,
    BatchTokenizedGenerateReqInput,
    SchedulerStats,
    TokenizedGenerateReqInput,
    WireError,
    encode,
    rpc_request_decoder,
    scheduler_input_decoder,
)
from vla_server.managers.batch_runner import BatchRunner
from vla_server.managers.finish_check import FinishChecker
from vla_server.managers.image_embedder import ImageEmbedder
from vla_server.managers.output_streamer import build_output, should_send
from vla_server.managers.req import Req, finish_abort
from vla_server.managers.req_kv import ReqKVManager
from vla_server.managers.schedule_policy import PrefillAdder
from vla_server.managers.scheduler_control import SchedulerControl
from vla_server.model.attention.registry import resolve_backend_name
from vla_server.model.model_runner import ModelRunner
from vla_server.multimodal.action_tokenizer import ActionTokenizer
from vla_server.process_utils import (
    become_child_process,
    configure_logging,
    parent_is_gone,
    zmq_socket,
)
from vla_server.server_args import PortArgs, ServerArgs, default_torch_threads

logger = logging.getLogger(__name__)


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


class Scheduler:
    def __init__(self, server_args: ServerArgs, port_args: PortArgs):
        from transformers import AutoTokenizer

        self.args = server_args
        torch.set_num_threads(server_args.torch_num_threads or default_torch_threads())
        self.runner = build_model_runner(server_args)
        self.tokenizer = AutoTokenizer.from_pretrained(server_args.resolved_tokenizer_path())
        self.kv = ReqKVManager(self.runner.req_to_token_pool, self.runner.kv_pool)
        self.embedder = (
            ImageEmbedder(self.runner, server_args.mm_embedding_cache_mb)
            if self.runner.vision
            else None
        )
        self.batch_runner = BatchRunner(
            self.runner, self.kv, server_args.random_seed, self.embedder
        )
        self.action_mask = self._action_mask()
        self.finish_checker = FinishChecker(self.tokenizer, set(self.runner.config.eos_token_ids))
        self.context_len = self.runner.context_len
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.paused = False
        self.control = SchedulerControl(self)

        self.zmq_ctx = zmq.Context(2)
        self.recv_sock = zmq_socket(
            self.zmq_ctx, zmq.PULL, port_args.scheduler_input_ipc_name, bind=True
        )
        self.rpc_sock = zmq_socket(self.zmq_ctx, zmq.DEALER, port_args.rpc_ipc_name, False)
        self.detok_sock = zmq_socket(self.zmq_ctx, zmq.PUSH, port_args.detokenizer_ipc_name, False)
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
            batch = None if self.paused else self.next_batch()
            if batch is None:
                if not self.poller.poll(1000) and parent_is_gone(parent_pid):
                    return
                continue
            self.run_batch(*batch)

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
                try:
                    msg = decoder.decode(raw)
                except WireError as e:
                    logger.warning("dropped a malformed message on the scheduler socket: %s", e)
                    continue
                if sock is self.rpc_sock:
                    self.rpc_sock.send(encode(self.control.handle(msg)))
                else:
                    self.handlers[type(msg)](msg)

    def next_batch(self) -> tuple[list[Req], bool] | None:
        self.reap_aborted()
        if self.waiting:
            adder = PrefillAdder(
                self.kv.free_tokens(), self.running, self.args.max_running_requests
            )
            for req in self.waiting:
                if not adder.try_add(req):
                    break
            if adder.admitted:
                admitted = set(adder.admitted)
                self.waiting = [r for r in self.waiting if r not in admitted]
                return adder.admitted, False
        if self.running:
            return self.running, True
        return None

    def run_batch(self, reqs: list[Req], is_decode: bool) -> None:
        if not is_decode:
            now = time.monotonic()
            for r in reqs:
                r.queue_time = now - r.arrival_time
        next_ids = self.batch_runner.run(reqs, is_decode)
        for req, tok in zip(reqs, next_ids, strict=True):
            if req.max_new_tokens > 0:
                req.output_ids.append(tok)
            self.finish_checker.check(req)
        if not is_decode:
            self.running.extend(reqs)
        finished = [r for r in reqs if r.finished]
        for r in finished:
            self.kv.release(r)
        if finished:
            done = set(finished)
            self.running = [r for r in self.running if r not in done]
        self.stream_output([r for r in reqs if should_send(r, self.args.stream_interval)])

    # ---- requests ----------------------------------------------------------------------------

    def handle_generate(self, msg: TokenizedGenerateReqInput) -> None:
        req = Req.from_wire(msg)
        n_in = len(req.origin_input_ids)
        if n_in == 0 or n_in >= self.context_len:
            self.reject(req, f"prompt has {n_in} tokens; the context length is {self.context_len}")
            return
        params = req.sampling_params
        params.max_new_tokens = min(params.max_new_tokens, self.context_len - n_in)
        if n_in + params.max_new_tokens > self.kv.total_tokens:
            self.reject(
                req,
                f"request needs {n_in + params.max_new_tokens} KV tokens (prompt {n_in} + "
                f"max_new_tokens {params.max_new_tokens}); the KV pool holds "
                f"{self.kv.total_tokens} (--max-total-tokens)",
            )
            return
        if req.num_actions:
            if self.action_mask is None:
                self.reject(req, "this model has no action tokenizer")
                return
            req.vocab_mask = self.action_mask
        req.generator = self.batch_runner.generator_for(params.seed)
        self.waiting.append(req)

    def reject(self, req: Req, message: str) -> None:
        req.finished_reason = finish_abort(message, status_code=400)
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
            if hit(r):
                r.to_abort = finish_abort()

    def reap_aborted(self) -> None:
        aborted = [r for r in self.running if r.to_abort is not None]
        if not aborted:
            return
        for r in aborted:
            r.finished_reason = r.to_abort
            self.kv.release(r)
        self.running = [r for r in self.running if r.to_abort is None]
        self.stream_output(aborted)

    # ---- output ------------------------------------------------------------------------------

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            num_running_reqs=len(self.running),
            num_waiting_reqs=len(self.waiting),
            kv_used_tokens=self.kv.used_tokens(),
            kv_total_tokens=self.kv.total_tokens,
            mm_cache_hits=self.embedder.hits if self.embedder else 0,
            mm_cache_misses=self.embedder.misses if self.embedder else 0,
        )

    def stream_output(self, reqs: list[Req]) -> None:
        if reqs:
            self.detok_sock.send(encode(build_output(reqs, self.stats())))

    def is_idle(self) -> bool:
        return not self.running and not self.waiting


def run_scheduler_process(
    server_args: ServerArgs, port_args: PortArgs, ready_pipe: Connection, parent_pid: int
) -> None:
    become_child_process("vla-scheduler")
    configure_logging(server_args.log_level)
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
