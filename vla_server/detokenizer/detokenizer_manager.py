"""The detokenizer process: token ids from the scheduler in, text deltas to the main process out.

It builds the checkpoint's policy family from the scheduler's `ModelInfo` (the launcher hands it
over once the scheduler is ready); the family's action decoder turns action requests' outputs
into actions."""

from __future__ import annotations

from multiprocessing.connection import Connection

import zmq

from vla_server import cpu_placement
from vla_server.config import DetokenizerConfig, PortArgs
from vla_server.detokenizer.incremental_decode import DecodeInput, IncrementalDecoder
from vla_server.io_struct import (
    BatchStrOutput,
    BatchTokenIDOutput,
    FinishActionError,
    ModelInfo,
    decode_or_drop,
    detokenizer_input_decoder,
    encode,
    protected_first,
)
from vla_server.policies.base import ActionOutput, ActionStep
from vla_server.policies.registry import checkpoint_tokenizer, from_info, import_plugins
from vla_server.process_utils import (
    IDLE_POLL_MS,
    Heartbeat,
    parent_is_gone,
    run_child_process,
    zmq_socket,
)


class DetokenizerManager:
    def __init__(self, cfg: DetokenizerConfig, port_args: PortArgs, info: ModelInfo):
        import_plugins(cfg.checkpoint.policy_plugins)
        family = from_info(info)
        tokenizer = checkpoint_tokenizer(family, cfg.checkpoint.tokenizer_path)
        self.decoder = IncrementalDecoder(tokenizer, vocab_size=len(tokenizer))
        self.actions = family.action_decoder(tokenizer)
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
            protected=msg.protected,
        )

    def _action_step(self, msg: BatchTokenIDOutput, i: int, new_ids: list[int]) -> ActionStep:
        if self.actions is None:  # the scheduler refuses action requests of such a model
            return ActionStep([], 0, "this model has no action decoder")
        return self.actions.step(
            ActionOutput(
                rid=msg.rids[i],
                new_ids=new_ids,
                finished=msg.finished_reasons[i],
                unnorm_key=msg.unnorm_keys[i] if msg.unnorm_keys else None,
                num_actions=msg.num_actions[i] if msg.num_actions else 0,
                relaxed_decoding=bool(msg.relaxed_decoding and msg.relaxed_decoding[i]),
                chunk=msg.chunks[i] if msg.chunks else None,
            )
        )

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
            self.serve_queued()

    def serve_queued(self) -> None:
        """Handle what waits on the socket, protected requests' messages first."""
        for msg in protected_first(self.queued()):
            self.send_sock.send(encode(self.handle(msg)))

    def queued(self) -> list[BatchTokenIDOutput]:
        """Every message waiting on the socket (at least one is), malformed ones dropped."""
        raws = [self.recv_sock.recv()]
        while self.recv_sock.get(zmq.EVENTS) & zmq.POLLIN:
            raws.append(self.recv_sock.recv())
        msgs = [decode_or_drop(detokenizer_input_decoder, raw, "detokenizer") for raw in raws]
        return [m for m in msgs if m is not None]


def run_detokenizer_process(
    cfg: DetokenizerConfig,
    port_args: PortArgs,
    info_pipe: Connection,
    ready_pipe: Connection,
    parent_pid: int,
    heartbeat: Heartbeat,
) -> None:
    """Waits for the scheduler's `ModelInfo` on `info_pipe`; reports ready once its sockets are
    up, so the node never answers /health before the path back to the clients exists."""
    run_child_process(
        "vla-detokenizer",
        cfg.log_level,
        ready_pipe,
        build=lambda: DetokenizerManager(cfg, port_args, cpu_placement.follow(info_pipe.recv())),
        ready_info=lambda _: {"status": "ready"},
        serve=lambda manager: manager.event_loop(parent_pid, heartbeat),
    )
