"""The scheduler's view of one request."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from vla_server.io_struct import (
    FinishAbort,
    FinishReason,
    Logprobs,
    MMItem,
    TokenizedGenerateReqInput,
)
from vla_server.mem_cache.prefix_key import prefix_lm_key_head
from vla_server.mem_cache.radix_cache import TreeNode
from vla_server.model.sampling import SamplingParams
from vla_server.multimodal.prefill_images import PrefillImages
from vla_server.scheduler.denoise_state import DenoiseState

# How many prompt ids ride along with a request's first output chunk as decoding context.
DETOKENIZE_CONTEXT_IDS = 5


@dataclass(eq=False)
class Req:
    """A request in the scheduler: the wire request as the front end sent it (`wire`, never
    changed) and the state the scheduler keeps for it. The prompt and its images are the wire's,
    or a session turn's rebuilt ones; the priority has the node's default applied."""

    wire: TokenizedGenerateReqInput
    origin_input_ids: list[int]
    mm_items: list[MMItem]
    priority: int = 0
    input_embeds: torch.Tensor | None = None
    arrival_time: float = field(default_factory=time.monotonic)
    vocab_mask: torch.Tensor | None = None  # constrained decoding: True = allowed token

    output_ids: list[int] = field(default_factory=list)
    # Tokens sampled by batches still in flight (overlap mode): part of the sequence, not yet
    # appended to output_ids; the next batch takes them straight from the previous one's output.
    pending_tokens: int = 0
    req_pool_idx: int | None = None
    kv_len: int = 0  # tokens whose K/V are in the pool or being written by a scheduled batch
    last_node: TreeNode | None = None  # radix node this request holds locked
    cached_tokens: int = 0
    finished_reason: FinishReason | None = None
    to_abort: FinishAbort | None = None
    generator: torch.Generator | None = None
    queue_time: float | None = None
    arrival_step: int = 0  # scheduler step counter when the request arrived
    queue_steps: int | None = None
    inflight: int = 0  # scheduled batches whose results are not processed yet
    in_background: bool = False  # part of the background lane's batch in flight
    num_retractions: int = 0
    # When its latest step was built (its arrival before the first): priority isolation holds
    # a less important request for at most --max-hold-ms after this.
    last_step_at: float = 0.0
    # Its latest step while it kept its KV (None before the first, and after a retraction), and
    # whether priority isolation held it since: the gaps it waited, isolation's bound.
    gap_from: float | None = None
    held: bool = False
    prompt_scored_upto: int = 0  # prompt tokens [0, n) whose logprobs were reported
    # Images resolved by this prefill, and features later chunks still need (model worker's).
    prefill_images: PrefillImages = field(default_factory=PrefillImages)
    # Prefix-LM: the radix key's first entry, a digest of the whole bidirectional prefix (see
    # `cache_key`); None for causal requests.
    key_head: int | None = None
    # An action request on a denoising head: its chunk (denoise_state.py); None otherwise.
    denoise: DenoiseState | None = None

    # streaming bookkeeping
    sent_output_len: int = 0
    first_chunk_sent: bool = False
    queue_time_sent: bool = False
    final_sent: bool = False
    pending_logprobs: Logprobs | None = None

    @classmethod
    def from_wire(cls, msg: TokenizedGenerateReqInput) -> Req:
        ids = list(msg.input_ids)
        head = None
        if 0 < msg.prefix_lm_len <= len(ids):
            head = prefix_lm_key_head(ids[: msg.prefix_lm_len], msg.position_shift)
        return cls(
            wire=msg,
            origin_input_ids=ids,
            mm_items=msg.mm_items,
            priority=msg.priority,
            input_embeds=None if msg.input_embeds is None else msg.input_embeds.to_torch(),
            key_head=head,
        )

    # The request's own fields, read from the wire struct.

    @property
    def rid(self) -> str:
        return self.wire.rid

    @property
    def sampling_params(self) -> SamplingParams:
        return self.wire.sampling_params

    @property
    def return_logprob(self) -> bool:
        return self.wire.return_logprob

    @property
    def logprob_start_len(self) -> int:
        return self.wire.logprob_start_len

    @property
    def top_logprobs_num(self) -> int:
        return self.wire.top_logprobs_num

    @property
    def stream(self) -> bool:
        return self.wire.stream

    @property
    def num_actions(self) -> int:  # > 0: decoding is constrained to action tokens
        return self.wire.num_actions

    @property
    def unnorm_key(self) -> str | None:
        return self.wire.unnorm_key

    @property
    def deadline(self) -> float | None:  # seconds since the epoch
        return self.wire.deadline

    @property
    def supersede(self) -> bool:
        return self.wire.supersede

    @property
    def session_id(self) -> str | None:
        """The robot/episode identity: `session_id`, or the session of `session_params`."""
        w = self.wire
        return w.session_id or (w.session_params.id if w.session_params is not None else None)

    @property
    def prefix_lm_len(self) -> int:  # > 0: the prompt's bidirectional prefix (a prefix-LM backbone)
        return self.wire.prefix_lm_len

    @property
    def position_shift(self) -> int:
        return self.wire.position_shift

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    def cache_key(self, n: int) -> list[int]:
        """The radix-cache key of the sequence's first `n` tokens: the tokens themselves, except
        that a prefix-LM request's first entry is the digest of its whole bidirectional prefix.
        The KV of a prefix's tokens depends on all of it (an image token's on the text after
        it), so a cached path is found only by a request with the identical prefix: a prefix
        that differs in any token, even its last, shares nothing (a partial match of it would
        be wrong KV), while an identical one may reuse any cached part of the sequence."""
        key = self.fill_ids[:n]
        if self.key_head is not None and key:
            key[0] = self.key_head
        return key

    @property
    def min_chunk(self) -> int:
        """New tokens the next prefill chunk must hold at least: a bidirectional prefix is
        computed in one chunk (its first tokens attend to its last)."""
        return max(self.prefix_lm_len - self.kv_len, 0)

    @property
    def seq_len(self) -> int:
        """Tokens in the sequence, including a sampled token still in flight."""
        return len(self.origin_input_ids) + len(self.output_ids) + self.pending_tokens

    @property
    def num_new_tokens(self) -> int:
        """Tokens still to be computed before the request can sample again."""
        return self.seq_len - self.kv_len

    @property
    def prompt_in_kv(self) -> bool:
        """The prompt's K/V are in the pool, or being written by a scheduled batch."""
        return self.kv_len >= len(self.origin_input_ids)

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
