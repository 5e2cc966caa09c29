"""Applying a batch's result: append sampled tokens, logprobs, finish checks, release KV,
stream outputs. In overlap mode this runs while the next batch is on the model worker, and a
request finished here may still be part of that batch: its extra token is discarded and its KV
is released only once no batch in flight uses it."""

from __future__ import annotations

from concurrent.futures import Future

from vla_server.io_struct import FinishActions
from vla_server.scheduler.deadline import StepTimer
from vla_server.scheduler.finish_check import FinishChecker
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.output_streamer import OutputStream
from vla_server.scheduler.req import Req
from vla_server.scheduler.schedule_batch import BatchResult, ReqLogprobs, ScheduledBatch
from vla_server.scheduler.sessions import SessionController
from vla_server.scheduler.state import SchedState
from vla_server.scheduler.step_cost import StepCostModel


class ResultProcessor:
    def __init__(
        self,
        state: SchedState,
        kv: KVCacheManager,
        sessions: SessionController,
        finish_checker: FinishChecker,
        timer: StepTimer,
        step_cost: StepCostModel,
        outputs: OutputStream,
    ):
        self.state = state
        self.kv = kv
        self.sessions = sessions
        self.finish_checker = finish_checker
        self.timer = timer
        self.step_cost = step_cost  # priority isolation's step-time model
        self.outputs = outputs

    def process(
        self, batch: ScheduledBatch, future: Future[BatchResult], background: bool = False
    ) -> None:
        """Apply `batch`'s result; a `background` lane's step ran beside a main-lane step, so
        its time measures neither lane's steps alone and is left out of the step-time models."""
        result = future.result()
        s = self.state
        s.max_step_s = max(s.max_step_s, result.forward_s)
        if batch.reqs and not background:
            self.timer.observe(batch.num_tokens, batch.is_decode, result.forward_s)
            self.step_cost.observe(batch.num_tokens, result.forward_s)
        if batch.denoise:
            self.timer.observe_denoise(result.denoise_s / batch.denoise_steps)
        for i, req in enumerate(batch.reqs):
            req.inflight -= 1
            req.in_background = False
            if batch.sample[i]:
                req.pending_tokens -= 1
            if req.finished:
                continue  # ended while this batch was in flight: its token is discarded
            self._logprobs(req, batch, i, result.logprobs[i])
            if batch.sample[i]:
                if req.max_new_tokens > 0:
                    req.output_ids.append(result.next_ids[i])
                self.finish_checker.check(req)
        for req in batch.denoise:
            req.inflight -= 1
            if not req.finished:
                _denoised(req, batch.denoise_steps)
        seen = set(batch.reqs)
        stepped = batch.reqs + [r for r in batch.denoise if r not in seen]
        self.finish([r for r in stepped if r.finished])
        self.outputs.send_ready(stepped)

    def finish(self, reqs: list[Req]) -> None:
        """Release the KV of finished requests no batch in flight still uses; stream their ends."""
        s = self.state
        done = [r for r in reqs if r.inflight == 0 and r in s.running]
        for r in done:
            key = r.cache_key(r.kv_len)
            self.kv.release(r)
            self.sessions.on_finish(r, key)
        if done:
            gone = set(done)
            s.running = [r for r in s.running if r not in gone]
        self.outputs.send([r for r in reqs if not r.final_sent])

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


def _denoised(req: Req, steps: int) -> None:
    """`steps` more Euler steps applied; the last one finishes the request by its budget."""
    chunk = req.denoise
    assert chunk is not None
    chunk.done += steps
    if chunk.done == chunk.num_steps:
        req.finished_reason = FinishActions(chunk.num_steps)
