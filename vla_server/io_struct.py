"""Every message that crosses a process boundary, and the codec that carries them.

All messages are tagged `msgspec.Struct`s encoded as MessagePack; each socket has a typed decoder
that accepts only the messages meant for it. Nothing is ever unpickled from a socket: a payload
that is not one of the expected structs raises `msgspec.DecodeError`/`ValidationError` and is
dropped by the receiver. Field order is part of the wire schema (array_like): append new fields
at the tail with defaults.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, TypeVar

import msgspec
import numpy as np
import torch

from vla_server.model.sampling import SamplingParams


class Tensor(msgspec.Struct, array_like=True, frozen=True):
    """An array on the wire: raw bytes + dtype name + shape."""

    data: bytes
    dtype: str
    shape: list[int]

    @classmethod
    def from_numpy(cls, a: np.ndarray) -> Tensor:
        a = np.ascontiguousarray(a)
        return cls(a.tobytes(), a.dtype.str, list(a.shape))

    def to_numpy(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape)

    def to_torch(self) -> torch.Tensor:
        return torch.from_numpy(self.to_numpy().copy())


class _Msg(msgspec.Struct, tag=True, kw_only=True, array_like=True):
    pass


# ---- TokenizerManager -> Scheduler (request ring) -------------------------------------------


class MMItem(msgspec.Struct, array_like=True):
    """One image of a request: its identity, where its tokens sit, and its pixels."""

    hash: str  # 32 hex chars: the 128-bit image hash (keys the embedding cache)
    offset: int  # first image-token position in input_ids
    length: int  # number of image-token positions
    pixel_values: Tensor  # float32 [C, H, W], preprocessed (3 channels per vision tower)


class SessionParams(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Continue an open session: the new prompt is rebuilt from a parent turn (SGLang semantics)."""

    id: str
    rid: str | None = None  # the turn to branch from (default: the session's last turn)
    offset: int | None = None  # keep only context[:offset] before the new tokens
    replace: bool = False  # drop the turns after the parent (all turns when rid is None)
    drop_previous_output: bool = False  # the parent's input without its output


class RtcOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """How a chunk is guided toward the robot's previous chunk (real-time chunking); the
    defaults are LeRobot's `RTCConfig` (`model/guidance.py` has the formulas)."""

    schedule: Literal["zeros", "ones", "linear", "exp"] = "linear"  # the prefix weights' shape
    max_guidance_weight: float = 10.0  # clips the guidance weight g(t)
    jacobian: Literal["identity", "vjp"] = "identity"  # LeRobot's code, or the paper's VJP


class Guidance(msgspec.Struct, array_like=True, frozen=True):
    """Real-time chunking of one denoised chunk: the fields of the request that asked for it,
    by the same names (`frontend/guidance_request.py`), `prev_chunk` normalised by the family."""

    prev_chunk: Tensor  # float32 [n, head width]: normalised, zero-padded; n <= chunk_size
    inference_delay: int  # actions the robot executes before this chunk starts
    execution_horizon: int  # LeRobot's: where the soft prefix weights reach 0 (paper: H - s)
    rtc: RtcOptions


class TokenizedGenerateReqInput(_Msg):
    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    input_embeds: Tensor | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False
    mm_items: list[MMItem] = []
    num_actions: int = 0  # > 0: an action request (the family's head decides what runs)
    unnorm_key: str | None = None
    priority: int = 0  # resolved by the main process (the request's, else the node default)
    deadline: float | None = None  # seconds since the epoch by which the request must finish
    # With `deadline`: the robot's control period (s). Action i of n is then due at deadline -
    # (n - 1 - i) * action_period, and the request lives while one of its actions can be on time.
    action_period: float = 0.0
    tokens_per_action: int = 0  # > 0: actions stream out one per this many tokens
    supersede: bool = False  # cancel this session's older waiting request
    session_id: str | None = None  # the robot/episode identity (no prompt rewriting)
    session_params: SessionParams | None = None
    # Prefix-LM models: the prompt's first `prefix_lm_len` tokens are attended
    # bidirectionally; the RoPE positions of the tokens after them are shifted by
    # `position_shift` (openpi's decode convention: 1). 0/0 for causal models.
    prefix_lm_len: int = 0
    position_shift: int = 0
    relaxed_decoding: bool = False  # token chunks: LeRobot's pad/truncate decoding, not an error
    # The normalised, zero-padded robot state an action head reads beside the prompt, or as
    # the prompt's token at `state_position` (its embedding the head's embedding of `state`).
    state: Tensor | None = None
    state_position: int | None = None
    guidance: Guidance | None = None  # a denoised chunk guided toward the previous chunk
    # float32 [chunk_size, head width]: where a denoised chunk starts, given by the caller
    # (SGLang's `observation.noise`); None: the seeded noise (`model/denoise.initial_noise`).
    noise: Tensor | None = None


class BatchTokenizedGenerateReqInput(_Msg):
    batch: list[TokenizedGenerateReqInput]


class AbortReq(_Msg):
    rid: str = ""
    abort_all: bool = False


SchedulerInput = TokenizedGenerateReqInput | BatchTokenizedGenerateReqInput | AbortReq


# ---- TokenizerManager <-> Scheduler (rpc control plane) --------------------------------------


class PauseGenerationReq(_Msg):
    call_id: int
    mode: str = "abort"


class ContinueGenerationReq(_Msg):
    call_id: int


class FlushCacheReq(_Msg):
    call_id: int


class UpdateWeightsFromDiskReq(_Msg):
    call_id: int
    model_path: str


class GetInternalStateReq(_Msg):
    call_id: int


class OpenSessionReq(_Msg):
    call_id: int
    session_id: str
    capacity_of_str_len: int = 0
    timeout: float | None = None  # seconds of inactivity before the session is closed


class CloseSessionReq(_Msg):
    call_id: int
    session_id: str


RpcRequest = (
    OpenSessionReq
    | CloseSessionReq
    | PauseGenerationReq
    | ContinueGenerationReq
    | FlushCacheReq
    | UpdateWeightsFromDiskReq
    | GetInternalStateReq
)


class RpcReply(_Msg):
    call_id: int
    success: bool
    message: str = ""
    data: dict[str, Any] = {}


# ---- Readiness (scheduler -> launcher -> main process and detokenizer) ----------------------


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the scheduler reports once its model is loaded: the family it detected (the other
    processes build the same family from it) and the limits every process needs."""

    family: str
    model_path: str
    architecture: str
    context_len: int
    vocab_size: int
    hidden_size: int
    max_total_num_tokens: int
    device: str
    dtype: str
    attention_backend: str
    image_token_id: int | None = None
    num_image_tokens: int = 0
    # the cores the detokenizer and front end keep to (cpu_placement.py; None: any)
    node_cpus: tuple[int, ...] | None = None

    def server_info(self) -> dict[str, Any]:
        """The fields `/server_info` and `/model_info` report (SGLang's names)."""
        out = msgspec.to_builtins(self)
        out["architectures"] = [out.pop("architecture")]
        return out


# ---- Finish reasons -------------------------------------------------------------------------
# One tagged union, made in the scheduler (the detokenizer adds action_error) and turned into
# SGLang's JSON (`{"type": "length", "length": 8}`) once, at the HTTP edge (`finish_json`).


class _Finish(msgspec.Struct, tag_field="type", frozen=True):
    pass


class FinishLength(_Finish, tag="length"):
    length: int


class FinishStop(_Finish, tag="stop"):
    matched: int | str  # the stop token id or the stop string


class FinishAbort(_Finish, tag="abort", omit_defaults=True):
    message: str  # always sent (no default): clients read it
    status_code: int
    field: str | None = None  # the request field a rejection is about, when there is one


def abort(
    message: str = "aborted", status_code: int = 499, field: str | None = None
) -> FinishAbort:
    """An abort: 499 for a client's own abort, 4xx/5xx for a rejection."""
    return FinishAbort(message, status_code, field)


class FinishSuperseded(_Finish, tag="superseded"):
    message: str = "a newer request of the session arrived"


class FinishDeadline(_Finish, tag="deadline"):
    message: str
    status_code: int = 504


class FinishActionError(_Finish, tag="action_error"):
    message: str


class FinishActions(_Finish, tag="actions"):
    """A denoised chunk is complete (no tokens were generated)."""

    steps: int  # the denoising steps it took


FinishReason = (
    FinishLength
    | FinishStop
    | FinishAbort
    | FinishSuperseded
    | FinishDeadline
    | FinishActionError
    | FinishActions
)


def finish_json(reason: FinishReason | None) -> dict[str, Any] | None:
    """The finish reason as SGLang's clients read it in `meta_info.finish_reason`."""
    return None if reason is None else msgspec.to_builtins(reason)


# ---- Scheduler -> Detokenizer -> TokenizerManager (output ring) ------------------------------


class Logprobs(msgspec.Struct, array_like=True):
    """Logprob values new since the previous chunk of one request."""

    output_vals: list[float] = []
    output_top: list[list[tuple[float, int]]] = []
    input_vals: list[float | None] = []
    input_ids: list[int] = []
    input_top: list[list[tuple[float, int]]] = []


class ReqOutputMeta(msgspec.Struct, array_like=True):
    """Per-request bookkeeping carried through the output ring unchanged."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    queue_time: float | None = None  # seconds from scheduler arrival to first forward
    num_retractions: int = 0
    queue_steps: int | None = None  # scheduler steps between arrival and first forward


class SchedulerStats(msgspec.Struct, array_like=True):
    num_running_reqs: int
    num_waiting_reqs: int
    kv_used_tokens: int
    kv_total_tokens: int
    mm_cache_hits: int = 0  # cumulative, images whose embedding came from the cache
    mm_cache_misses: int = 0  # cumulative, images that went through the vision tower
    kv_cached_tokens: int = 0  # evictable radix-cache tokens (reusable prefixes)
    prefix_hit_tokens: int = 0  # cumulative prompt tokens served from the radix cache
    prefix_queried_tokens: int = 0  # cumulative prompt tokens looked up
    num_retractions: int = 0  # cumulative preemptions/retractions
    mm_prefix_cache_images: int = 0  # cumulative, images whose positions all came as a prefix
    held_steps: int = 0  # cumulative, steps requests were held out of by priority isolation


class BatchTokenIDOutput(_Msg):
    rids: list[str]
    finished_reasons: list[FinishReason | None]
    decode_ids: list[list[int]]  # new ids since the previous send
    read_offsets: list[int]  # prompt length: where the first send's decoding starts
    skip_special_tokens: list[bool]
    stop_strs: list[list[str]]
    metas: list[ReqOutputMeta]
    logprobs: list[Logprobs | None]
    stats: SchedulerStats
    unnorm_keys: list[str | None] = []  # per request: its unnorm key, when it decodes actions
    wants_actions: list[bool] = []
    no_stop_trim: list[bool] = []  # per request: keep the matched stop string/token in the text
    spaces_between_special_tokens: list[bool] = []
    num_actions: list[int] = []  # per request: actions it asked for (a chunk's first n)
    relaxed_decoding: list[bool] = []  # per request: pad/truncate decoding of a token chunk
    # per request: a denoising request's chunk [chunk_size, width] (float32, normalised, padded)
    # once it is finished; None otherwise
    chunks: list[Tensor | None] = []
    # every request here is protected by priority isolation: handled before others on the way
    # (detokenizer, main process; see frontend/stream_order.py)
    protected: bool = False


class BatchStrOutput(_Msg):
    rids: list[str]
    finished_reasons: list[FinishReason | None]
    output_strs: list[str]  # new text since the previous send
    output_ids: list[list[int]]  # new ids since the previous send
    metas: list[ReqOutputMeta]
    logprobs: list[Logprobs | None]
    stats: SchedulerStats
    actions: list[list[list[float]]] = []  # per request: action vectors completed since last send
    num_actions: list[int] = []  # per request: actions completed so far
    protected: bool = False  # as the BatchTokenIDOutput's it comes from


OutputMsg = TypeVar("OutputMsg", BatchTokenIDOutput, BatchStrOutput)


def protected_first(msgs: list[OutputMsg]) -> list[OutputMsg]:
    """Output messages with the protected ones first, each group in its order (a request's
    messages are all in one group, so each request's own order is kept)."""
    return [m for m in msgs if m.protected] + [m for m in msgs if not m.protected]


# ---- codec -----------------------------------------------------------------------------------

_encoder = msgspec.msgpack.Encoder()


def encode(msg: msgspec.Struct) -> bytes:
    return _encoder.encode(msg)


def decoder_for(msg_type: Any) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(type=msg_type)


scheduler_input_decoder = decoder_for(SchedulerInput)
rpc_request_decoder = decoder_for(RpcRequest)
rpc_reply_decoder = decoder_for(RpcReply)
detokenizer_input_decoder = decoder_for(BatchTokenIDOutput)
tokenizer_input_decoder = decoder_for(BatchStrOutput)
model_info_decoder = decoder_for(ModelInfo)

_WireError = (msgspec.DecodeError, msgspec.ValidationError)
_log = logging.getLogger(__name__)


def decode_or_drop(decoder: msgspec.msgpack.Decoder, raw: bytes, channel: str) -> Any | None:
    """The message in `raw`, or None, logged, when it is malformed: a bad frame never stops a
    receive loop."""
    try:
        return decoder.decode(raw)
    except _WireError as e:
        _log.warning("dropped a malformed message on the %s socket: %s", channel, e)
        return None
