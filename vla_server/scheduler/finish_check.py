"""When a request is done: length, EOS, stop token ids, stop strings, abort."""

from __future__ import annotations

from typing import Any

from vla_server.io_struct import FinishLength, FinishStop
from vla_server.scheduler.req import Req


class FinishChecker:
    def __init__(self, tokenizer: Any, eos_token_ids: set[int]):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids

    def check(self, req: Req) -> None:
        """Set `req.finished_reason` if the token just appended ends the request."""
        if req.finished:
            return
        if req.to_abort is not None:
            req.finished_reason = req.to_abort
            return
        params = req.sampling_params
        n = len(req.output_ids)
        if n >= params.max_new_tokens:
            req.finished_reason = FinishLength(params.max_new_tokens)
            return
        if n == 0:
            return
        last = req.output_ids[-1]
        if last in params.stop_token_ids or (not params.ignore_eos and last in self.eos_token_ids):
            req.finished_reason = FinishStop(last)
            return
        if params.stop:
            matched = self._stop_string(req)
            if matched is not None:
                req.finished_reason = FinishStop(matched)

    def _stop_string(self, req: Req) -> str | None:
        longest = max(len(s) for s in req.sampling_params.stop)
        # Every token decodes to at least one character, except specials; a few extra tokens
        # of tail cover a stop string that a multi-byte character straddles.
        tail = req.output_ids[-(longest + 3) :]
        text = self.tokenizer.decode(
            tail, skip_special_tokens=req.sampling_params.skip_special_tokens
        )
        for s in req.sampling_params.stop:
            if s in text:
                return s
        return None
