"""The scheduler process: the shell around a SchedulerCore. It owns the sockets (requests in,
control rpc, outputs to the detokenizer), decodes every message with its typed decoder (a
malformed one is logged and dropped), runs the core's steps with the model on a worker thread,
sleeps on the sockets when there is nothing to do (at most IDLE_POLL_MS: its heartbeat for the
watchdog beats once per loop), and does the readiness handshake.
See docs/architecture.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import torch
import zmq

from vla_server.config import ModelRunnerConfig, PortArgs, SchedulerConfig
from vla_server.io_struct import (
    AbortReq,
    BatchTokenIDOutput,
    BatchTokenizedGenerateReqInput,
    TokenizedGenerateReqInput,
    decode_or_drop,
    encode,
    rpc_request_decoder,
    scheduler_input_decoder,
)
from vla_server.process_utils import (
    IDLE_POLL_MS,
    Heartbeat,
    parent_is_gone,
    run_child_process,
    zmq_socket,
)
from vla_server.scheduler.factory import build_core, place_threads, ready_info
from vla_server.scheduler.thread_plan import ThreadPlan

# With waiting requests (deadlines to check) the loop looks again soon even without messages.
WAITING_POLL_MS = 50


class SchedulerProcess:
    def __init__(self, cfg: SchedulerConfig, model: ModelRunnerConfig, port_args: PortArgs):
        decode_threads = ThreadPlan.of(model).decode
        torch.set_num_threads(decode_threads)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-worker")
        self.core, runner = build_core(cfg, model, self._send_output, self.worker)
        node_cpus = place_threads(cfg, self.core, self.worker, decode_threads)
        self.info = ready_info(
            runner, self.core.kv.total_tokens, model.attention_backend, node_cpus
        )
        self._init_sockets(port_args)
        core = self.core
        self.handlers: dict[type, Callable[[Any], None]] = {
            TokenizedGenerateReqInput: core.handle_generate,
            BatchTokenizedGenerateReqInput: lambda b: [core.handle_generate(r) for r in b.batch],
            AbortReq: core.handle_abort,
        }

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

    def _send_output(self, out: BatchTokenIDOutput) -> None:
        self.detok_sock.send(encode(out))

    def event_loop(self, parent_pid: int, heartbeat: Heartbeat) -> None:
        core = self.core
        while True:
            heartbeat.beat()
            self.ingest()
            if core.step():
                continue
            timeout = WAITING_POLL_MS if core.state.waiting else IDLE_POLL_MS
            if not self.poller.poll(timeout) and parent_is_gone(parent_pid):
                return

    def ingest(self) -> None:
        """Everything queued on both sockets, without blocking; rpc calls are answered at once."""
        for sock, decoder in (
            (self.recv_sock, scheduler_input_decoder),
            (self.rpc_sock, rpc_request_decoder),
        ):
            # The events flag, not a recv raising Again: this runs twice per step, and building
            # the exception was a measurable share of an idle socket's cost.
            while sock.get(zmq.EVENTS) & zmq.POLLIN:
                msg = decode_or_drop(decoder, sock.recv(zmq.NOBLOCK), "scheduler")
                if msg is None:
                    continue
                if sock is self.rpc_sock:
                    self.rpc_sock.send(encode(self.core.handle_control(msg)))
                else:
                    self.handlers[type(msg)](msg)


# The model worker thread and the scheduler thread hand the GIL back and forth every step;
# Python's default 5 ms switch interval would add up to that much to each step's latency.
GIL_SWITCH_INTERVAL_S = 0.0002


def run_scheduler_process(
    cfg: SchedulerConfig,
    model: ModelRunnerConfig,
    port_args: PortArgs,
    ready_pipe: Connection,
    parent_pid: int,
    heartbeat: Heartbeat,
) -> None:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    run_child_process(
        "vla-scheduler",
        cfg.log_level,
        ready_pipe,
        build=lambda: SchedulerProcess(cfg, model, port_args),
        ready_info=lambda process: process.info,
        serve=lambda process: process.event_loop(parent_pid, heartbeat),
    )
