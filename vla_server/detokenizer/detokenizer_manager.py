"""The detokenizer process: token ids from the scheduler in, text deltas to the main process out."""

from __future__ import annotations

from multiprocessing.connection import Connection

import zmq

from vla_server.config import DetokenizerConfig, PortArgs
from vla_server.detokenizer.incremental_decode import DecodeInput, IncrementalDecoder
from vla_server.io_struct import (
    BatchStrOutput,
    BatchTokenIDOutput,
    FinishActionError,
    decode_or_drop,
    detokenizer_input_decoder,
    encode,
)
from vla_server.model.tokenizer import load_tokenizer
from vla_server.policies.bin_actions.action_tokenizer import ActionTokenizer, load_action_tokenizer
from vla_server.policies.bin_actions.detokenizer import ActionDetokenizer, ActionStep
from vla_server.policies.pi0.detokenizer import chunk_actions
from vla_server.policies.pi0.flow_actions import FlowActionPolicy
from vla_server.policies.pi0fast.detokenizer import FastActionDetokenizer
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.process_utils import (
    IDLE_POLL_MS,
    Heartbeat,
    parent_is_gone,
    run_child_process,
    zmq_socket,
)


class DetokenizerManager:
    def __init__(self, cfg: DetokenizerConfig, port_args: PortArgs):
        tokenizer = load_tokenizer(cfg.checkpoint.tokenizer_path)
        self.decoder = IncrementalDecoder(tokenizer, vocab_size=len(tokenizer))
        actions = load_action_tokenizer(cfg.checkpoint.model_path, tokenizer)
        self.actions = ActionDetokenizer(actions if isinstance(actions, ActionTokenizer) else None)
        self.fast = (
            FastActionDetokenizer(actions) if isinstance(actions, FastActionTokenizer) else None
        )
        self.flow = actions if isinstance(actions, FlowActionPolicy) else None
        self.ctx = zmq.Context(2)
        self.recv_sock = zmq_socket(self.ctx, zmq.PULL, port_args.detokenizer_ipc_name, bind=True)
        self.send_sock = zmq_socket(self.ctx, zmq.PUSH, port_args.tokenizer_ipc_name, bind=False)

    def handle(self, msg: BatchTokenIDOutput) -> BatchStrOutput:
        n = len(msg.rids)
        items = [
            DecodeInput(rid, ids, ctx, skip, stops, fin, no_trim, spaces)
            for rid, ids, ctx, skip, stops, fin, no_trim, spaces in zip(
                msg.rids,
                msg.decode_ids,
                msg.read_offsets,
                msg.skip_special_tokens,
                msg.stop_strs,
                msg.finished_reasons,
                msg.no_stop_trim or [False] * n,
                msg.spaces_between_special_tokens or [True] * n,
                strict=True,
            )
        ]
        texts = self.decoder.step(items)
        # Output ids exclude the left-context prompt ids the scheduler sends with a first chunk.
        out_ids = [
            ids[ctx:] if rid_new else ids
            for ids, ctx, rid_new in zip(
                msg.decode_ids, msg.read_offsets, self._first_flags(msg), strict=True
            )
        ]
        finished = list(msg.finished_reasons)
        actions: list[list[list[float]]] = [[] for _ in msg.rids]
        counts = [0] * len(msg.rids)
        for i, wants in enumerate(msg.wants_actions):
            if wants:
                step = self._action_step(msg, i, out_ids[i])
                actions[i], counts[i] = step.actions, step.count
                if step.error is not None:
                    finished[i] = FinishActionError(step.error)
        return BatchStrOutput(
            rids=msg.rids,
            finished_reasons=finished,
            output_strs=texts,
            output_ids=out_ids,
            metas=msg.metas,
            logprobs=msg.logprobs,
            stats=msg.stats,
            actions=actions,
            num_actions=counts,
        )

    def _action_step(self, msg: BatchTokenIDOutput, i: int, new_ids: list[int]) -> ActionStep:
        rid, finished = msg.rids[i], msg.finished_reasons[i]
        count = msg.action_counts[i] if msg.action_counts else 0
        if self.flow is not None:
            return chunk_actions(self.flow, msg.action_chunks[i], count)
        if self.fast is None:
            return self.actions.step(rid, new_ids, msg.action_keys[i], finished is not None)
        relaxed = bool(msg.relaxed_actions and msg.relaxed_actions[i])
        return self.fast.step(rid, new_ids, finished, count, relaxed)

    @staticmethod
    def _first_flags(msg: BatchTokenIDOutput) -> list[bool]:
        # read_offsets is non-zero only on a request's first chunk (it carries the context length)
        return [off > 0 for off in msg.read_offsets]

    def event_loop(self, parent_pid: int, heartbeat: Heartbeat) -> None:
        poller = zmq.Poller()
        poller.register(self.recv_sock, zmq.POLLIN)
        while True:
            heartbeat.beat()
            if not poller.poll(IDLE_POLL_MS):
                if parent_is_gone(parent_pid):
                    return
                continue
            msg = decode_or_drop(detokenizer_input_decoder, self.recv_sock.recv(), "detokenizer")
            if msg is not None:
                self.send_sock.send(encode(self.handle(msg)))


def run_detokenizer_process(
    cfg: DetokenizerConfig,
    port_args: PortArgs,
    ready_pipe: Connection,
    parent_pid: int,
    heartbeat: Heartbeat,
) -> None:
    """Reports ready once its sockets are up, so the node never answers /health before the
    path back to the clients exists."""
    run_child_process(
        "vla-detokenizer",
        cfg.log_level,
        ready_pipe,
        build=lambda: DetokenizerManager(cfg, port_args),
        ready_info=lambda _: {"status": "ready"},
        serve=lambda manager: manager.event_loop(parent_pid, heartbeat),
    )
