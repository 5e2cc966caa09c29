"""Which requests send output after a step, the BatchTokenIDOutput that carries it, and the
stream that hands it to the output sink."""

from __future__ import annotations

from collections.abc import Callable

from vla_server.io_struct import BatchTokenIDOutput, ReqOutputMeta, SchedulerStats
from vla_server.scheduler.interfaces import OutputSink
from vla_server.scheduler.req import DETOKENIZE_CONTEXT_IDS, Req
from vla_server.scheduler.sessions import SessionController

# A non-streaming request still ships its ids every so often, so the detokenizer's work stays
# incremental instead of one large decode at the finish.
NON_STREAM_FLUSH_TOKENS = 50


def should_send(req: Req, stream_interval: int) -> bool:
    if req.final_sent:
        return False
    if req.finished:
        return True
    unsent = len(req.output_ids) - req.sent_output_len
    if unsent <= 0:
        return False
    if req.stream:
        return not req.first_chunk_sent or unsent >= stream_interval
    return unsent >= NON_STREAM_FLUSH_TOKENS


def build_output(reqs: list[Req], stats: SchedulerStats) -> BatchTokenIDOutput:
    out = BatchTokenIDOutput(
        rids=[],
        finished_reasons=[],
        decode_ids=[],
        read_offsets=[],
        skip_special_tokens=[],
        stop_strs=[],
        metas=[],
        logprobs=[],
        stats=stats,
        unnorm_keys=[],
        wants_actions=[],
        no_stop_trim=[],
        spaces_between_special_tokens=[],
        num_actions=[],
        relaxed_decoding=[],
        chunks=[],
    )
    for req in reqs:
        new_ids = req.output_ids[req.sent_output_len :]
        context: list[int] = []
        if not req.first_chunk_sent:
            context = (
                req.origin_input_ids[-DETOKENIZE_CONTEXT_IDS:] if req.input_embeds is None else []
            )
        out.rids.append(req.rid)
        out.finished_reasons.append(req.finished_reason)
        out.decode_ids.append(context + new_ids)
        out.read_offsets.append(len(context))
        out.skip_special_tokens.append(req.sampling_params.skip_special_tokens)
        out.stop_strs.append(req.sampling_params.stop)
        out.no_stop_trim.append(req.sampling_params.no_stop_trim)
        out.spaces_between_special_tokens.append(req.sampling_params.spaces_between_special_tokens)
        out.metas.append(
            ReqOutputMeta(
                prompt_tokens=len(req.origin_input_ids),
                completion_tokens=len(req.output_ids),
                cached_tokens=req.cached_tokens,
                queue_time=None if req.queue_time_sent else req.queue_time,
                num_retractions=req.num_retractions,
                queue_steps=None if req.queue_time_sent else req.queue_steps,
            )
        )
        out.logprobs.append(req.pending_logprobs)
        out.wants_actions.append(req.num_actions > 0)
        out.unnorm_keys.append(req.unnorm_key)
        out.num_actions.append(req.num_actions)
        out.relaxed_decoding.append(req.wire.relaxed_decoding)
        out.chunks.append(None if req.denoise is None else req.denoise.chunk())
        req.pending_logprobs = None
        req.queue_time_sent = req.queue_time_sent or req.queue_time is not None
        req.sent_output_len = len(req.output_ids)
        req.first_chunk_sent = True
        req.final_sent = req.finished
    return out


class OutputStream:
    """Every output of the scheduler leaves through here, with the node's stats of the moment."""

    def __init__(
        self,
        sink: OutputSink,
        stats: Callable[[], SchedulerStats],
        sessions: SessionController,
        stream_interval: int,
        protects: Callable[[Req], bool] | None = None,
    ):
        self.sink = sink
        self.stats = stats
        self.sessions = sessions
        self.stream_interval = stream_interval
        self.protects = protects  # priority isolation: protected outputs in messages of their own

    def send(self, reqs: list[Req]) -> None:
        if not reqs:
            return
        for r in reqs:
            # Ended without KV (never ran, or retracted): the session forgets or keeps the turn.
            if r.finished and r.req_pool_idx is None and r.session_id is not None:
                self.sessions.end_unrun(r)
        if self.protects is None:
            self.sink(build_output(reqs, self.stats()))
            return
        first = [r for r in reqs if self.protects(r)]
        rest = [r for r in reqs if not self.protects(r)]
        for group, protected in ((first, True), (rest, False)):
            if group:
                out = build_output(group, self.stats())
                out.protected = protected
                self.sink(out)

    def send_ready(self, reqs: list[Req]) -> None:
        self.send([r for r in reqs if should_send(r, self.stream_interval)])
