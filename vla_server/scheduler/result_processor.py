"""Applying a batch's result: append sampled tokens, logprobs, finish checks, release KV,
stream outputs. In overlap mode this runs while the next batch is on the model worker, and a
request finished here may still be part of that batch: its extra token is discarded and its KV
is released only once no batch in flight uses it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

from vla_server.scheduler.req import Req
from vla_server.scheduler.schedule_batch import BatchResult, ReqLogprobs, ScheduledBatch

if TYPE_CHECKING:
    from vla_server.scheduler.scheduler import Scheduler


class ResultProcessor:
    def __init__(self, scheduler: Scheduler):
        self.s = scheduler

    def process(self, batch: ScheduledBatch, future: Future[BatchResult]) -> None:
        result = future.result()
        self.s.timer.observe(batch.num_tokens, batch.is_decode, result.forward_s)
        for i, req in enumerate(batch.reqs):
            req.inflight -= 1
            if batch.sample[i]:
                req.pending_tokens -= 1
            if req.finished:
                continue  # ended while this batch was in flight: its token is discarded
            self._logprobs(req, batch, i, result.logprobs[i])
            if batch.sample[i]:
                if req.max_new_tokens > 0:
                    req.output_ids.append(result.next_ids[i])
                self.s.finish_checker.check(req)
        self.finish([r for r in batch.reqs if r.finished])
        self.s.send_ready_outputs(batch.reqs)

    def finish(self, reqs: list[Req]) -> None:
        """Release the KV of finished requests no batch in flight still uses; stream their ends."""
        s = self.s
        done = [r for r in reqs if r.inflight == 0 and r in s.running]
        for r in done:
            key = r.fill_ids[: r.kv_len]
            s.kv.release(r)
            s.sessions.on_finish(r, key)
        if done:
            gone = set(done)
            s.running = [r for r in s.running if r not in gone]
        s.stream_output([r for r in reqs if not r.final_sent])

    def _logprobs(self, req: Req, batch: ScheduledBatch, i: int, lp: ReqLogprobs | None) -> None:
        if not req.return_logprob:
            return
        d = req.logprobs_delta()
        if req.logprob_start_len == 0 and req.prompt_scored_upto == 0:
            d.input_vals.append(None)  # the first prompt token has no logprob
            d.input_ids.append(req.origin_input_ids[0])
            d.input_top.append([])
            req.prompt_scored_upto = 1
        if lp is None:
            return
        if lp.prompt_ids:
            d.input_vals.extend(lp.prompt_vals)
            d.input_ids.extend(lp.prompt_ids)
            d.input_top.extend(lp.prompt_top)
            span = batch.prompt_spans[i]
            assert span is not None
            req.prompt_scored_upto = batch.prefix_lens[i] + span[1] + 1
        if lp.output is not None and req.max_new_tokens > 0:
            d.output_vals.append(lp.output[0])
            d.output_top.append(lp.output[1])
