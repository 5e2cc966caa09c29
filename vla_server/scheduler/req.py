"""The scheduler's view of one request."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vla_server.io_struct import Logprobs, MMItem, TokenizedGenerateReqInput
from vla_server.mem_cache.radix_cache import TreeNode
from vla_server.model.sampling import SamplingParams
from vla_server.multimodal.prefill_images import PrefillImages

# How many prompt ids ride along with a request's first output chunk as decoding context.
DETOKENIZE_CONTEXT_IDS = 5


def finish_length(n: int) -> dict[str, Any]:
    return {"type": "length", "length": n}


def finish_stop(matched: int | str) -> dict[str, Any]:
    return {"type": "stop", "matched": matched}


def finish_abort(
    message: str = "aborted", status_code: int = 499, field: str | None = None
) -> dict[str, Any]:
    reason = {"type": "abort", "message": message, "status_code": status_code}
    if field is not None:
        reason["field"] = field  # the request field a rejection is about
    return reason


@dataclass(eq=False)
class Req:
    rid: str
    origin_input_ids: list[int]
    sampling_params: SamplingParams
    input_embeds: torch.Tensor | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False
    arrival_time: float = field(default_factory=time.monotonic)
    mm_items: list[MMItem] = field(default_factory=list)
    num_actions: int = 0
    unnorm_key: str | None = None
    vocab_mask: torch.Tensor | None = None  # constrained decoding: True = allowed token
    priority: int = 0
    deadline: float | None = None  # seconds since the epoch
    supersede: bool = False
    session_id: str | None = None

    output_ids: list[int] = field(default_factory=list)
    # Tokens sampled by batches still in flight (overlap mode): part of the sequence, not yet
    # appended to output_ids; the next batch takes them straight from the previous one's output.
    pending_tokens: int = 0
    req_pool_idx: int | None = None
    kv_len: int = 0  # tokens whose K/V are in the pool or being written by a scheduled batch
    last_node: TreeNode | None = None  # radix node this request holds locked
    cached_tokens: int = 0
    finished_reason: dict[str, Any] | None = None
    to_abort: dict[str, Any] | None = None
    generator: torch.Generator | None = None
    queue_time: float | None = None
    arrival_step: int = 0  # scheduler step counter when the request arrived
    queue_steps: int | None = None
    inflight: int = 0  # scheduled batches whose results are not processed yet
    num_retractions: int = 0
    prompt_scored_upto: int = 0  # prompt tokens [0, n) whose logprobs were reported
    # Images resolved by this prefill, and features later chunks still need (model worker's).
    prefill_images: PrefillImages = field(default_factory=PrefillImages)

    # streaming bookkeeping
    sent_output_len: int = 0
    first_chunk_sent: bool = False
    queue_time_sent: bool = False
    final_sent: bool = False
    pending_logprobs: Logprobs | None = None

    @classmethod
    def from_wire(cls, msg: TokenizedGenerateReqInput) -> Req:
        embeds = msg.input_embeds.to_torch() if msg.input_embeds is not None else None
        return cls(
            rid=msg.rid,
            origin_input_ids=list(msg.input_ids),
            sampling_params=msg.sampling_params,
            input_embeds=embeds,
            return_logprob=msg.return_logprob,
            logprob_start_len=msg.logprob_start_len,
            top_logprobs_num=msg.top_logprobs_num,
            stream=msg.stream,
            mm_items=msg.mm_items,
            num_actions=msg.num_actions,
            unnorm_key=msg.unnorm_key,
            priority=msg.priority or 0,
            deadline=msg.deadline,
            supersede=msg.supersede,
            session_id=msg.session_id or (msg.session_params.id if msg.session_params else None),
        )

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        """Tokens in the sequence, including a sampled token still in flight."""
        return len(self.origin_input_ids) + len(self.output_ids) + self.pending_tokens

    @property
    def num_new_tokens(self) -> int:
        """Tokens still to be computed before the request can sample again."""
        return self.seq_len - self.kv_len

    @property
    def is_decoding(self) -> bool:
        return self.num_new_tokens == 1 and self.kv_len >= len(self.origin_input_ids)

    @property
    def cacheable(self) -> bool:
        """Caller embeddings have no token ids to key a prefix cache on."""
        return self.input_embeds is None

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def max_new_tokens(self) -> int:
        return self.sampling_params.max_new_tokens

    def remaining_new_tokens(self) -> int:
        return max(self.max_new_tokens - len(self.output_ids) - self.pending_tokens, 0)

    def logprobs_delta(self) -> Logprobs:
        if self.pending_logprobs is None:
            self.pending_logprobs = Logprobs()
        return self.pending_logprobs
