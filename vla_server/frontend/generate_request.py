"""The one normalised request every route produces (`GenerateItem`), and the body of
`POST /generate` / `Engine.generate` (`GenerateReqInput`) with its normalisation into items.

Each route parses its own body (this one, chat completions, actions, an openpi observation) and
turns it into one `GenerateItem` per prompt; the TokenizerManager turns an item into the wire
request. A `GenerateItem` is valid by construction for everything that needs neither the
tokenizer, the images nor the node's state: any problem raises a `RequestError` naming the
field, before any request state exists.

A `GenerateReqInput` carries exactly one of `text`, `input_ids` or `input_embeds`, either for one
prompt or for a batch (a list of prompts); a batch's real-time chunking fields may differ per
prompt (`guidance_request.py`). Its fields and those of `sampling_params` are checked
against SGLang's schema first (`field_tables.py`). `sampling_params.n` > 1 asks for n samples of
each prompt: n items, and the reply is a list, as SGLang's.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from vla_server.errors import RequestError, from_msgspec
from vla_server.frontend.field_tables import GENERATE, SAMPLING_PARAMS
from vla_server.frontend.guidance_request import GuidanceAsk, guidance_ask
from vla_server.frontend.json_body import check_int_range, decode_json
from vla_server.io_struct import RtcOptions, SessionParams, Tensor
from vla_server.model.sampling import SamplingParams


@dataclass
class ModelLimits:
    vocab_size: int
    hidden_size: int
    context_len: int


@dataclass(frozen=True)
class GenerateItem:
    """One prompt, validated: exactly one of text / input_ids / input_embeds is set. Complete
    when built but for the defaults `SessionRegistry.apply` fills into a new item; never
    changed after."""

    rid: str
    sampling_params: SamplingParams
    text: str | None = None
    input_ids: list[int] | None = None
    input_embeds: np.ndarray | None = None
    images: list[Any] = field(default_factory=list)
    mm_hashes: list[Any] | str | None = None  # one per image, as the caller gave them
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    index: int = 0  # the prompt's place in its batch
    in_batch: bool = False  # the reply is a list (or its chunks carry `index`)
    unnorm_key: str | None = None
    num_actions: int | None = None  # None: a plain request, no actions
    priority: int | None = None
    deadline_ms: float | None = None  # relative to capture_time, or to the receive time
    # The robot's control period: the actions are due one period apart, the last at the
    # deadline, and the node keeps a request while one of them can still be on time.
    control_period_ms: float | None = None
    capture_time: float | None = None  # seconds since the epoch (the camera frame's stamp)
    supersede: bool = False  # a newer request of the session cancels its older waiting one
    session_id: str | None = None
    session_params: SessionParams | None = None
    relaxed_decoding: bool = False  # a token chunk: LeRobot's pad/truncate decoding
    state: list[float] | None = None  # raw robot state that rides beside the prompt
    guidance: GuidanceAsk | None = None  # real-time chunking toward the previous chunk
    noise: Tensor | None = None  # a denoised chunk's starting noise (`noise_request.py`)

    def deadline_at(self, received: float) -> float | None:
        """Seconds since the epoch by which the request must finish: `deadline_ms` after
        `capture_time`, else after `received`."""
        if self.deadline_ms is None:
            return None
        return (self.capture_time or received) + self.deadline_ms / 1000

    def __post_init__(self) -> None:
        if self.logprob_start_len < -1:
            raise RequestError("must be >= -1 (-1: output tokens only)", "logprob_start_len")
        if self.top_logprobs_num < 0:
            raise RequestError("must be >= 0", "top_logprobs_num")
        if self.num_actions is not None and self.num_actions < 1:
            raise RequestError("must be >= 1", "num_actions")
        if self.deadline_ms is not None and not self.deadline_ms > 0:
            raise RequestError("must be > 0", "deadline_ms")
        period = self.control_period_ms
        if period is not None and not (math.isfinite(period) and period > 0):
            raise RequestError("must be a finite number > 0", "control_period_ms")
        if self.session_params is None:
            if self.supersede and self.session_id is None:
                raise RequestError("supersede needs session_id or session_params", "supersede")
        elif self.session_id is not None:
            raise RequestError("give session_id or session_params, not both", "session_id")


def parse_sampling(
    d: dict[str, Any] | None, limits: ModelLimits, field: str = "sampling_params"
) -> SamplingParams:
    """`d` (SGLang's sampling parameters) as checked SamplingParams; errors name
    `field`.<the parameter>."""
    given = SAMPLING_PARAMS.implemented_fields(d or {}, field)
    if isinstance(given.get("stop"), str):
        given["stop"] = [given["stop"]]
    try:
        params = msgspec.convert(given, SamplingParams)
    except msgspec.ValidationError as e:
        raise from_msgspec(e, prefix=field) from None
    try:
        params.validate(limits.vocab_size, limits.context_len)
    except ValueError as e:
        raise RequestError(str(e), field=".".join(filter(None, (field, _field_of(e))))) from None
    return params


def _field_of(e: ValueError) -> str:
    # SamplingParams.validate puts the field name first: "<field> must ..."
    return str(e).split()[0].strip("`:'\"")


def check_token_ids(ids: list[int], limits: ModelLimits, field: str) -> None:
    if not ids:
        raise RequestError("the prompt is empty", field)
    bad = next((t for t in ids if not 0 <= t < limits.vocab_size), None)
    if bad is not None:
        raise RequestError(
            f"token id {bad} is outside the vocabulary [0, {limits.vocab_size})", field
        )


def check_prompt_length(n: int, limits: ModelLimits, field: str) -> None:
    if n >= limits.context_len:
        raise RequestError(
            f"the prompt has {n} tokens; the model's context length is {limits.context_len} "
            "(prompt plus at least one new token must fit)",
            field,
        )


# ---- POST /generate and Engine.generate ----------------------------------------------------


class GenerateReqInput(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    text: str | list[str] | None = None
    input_ids: list[Any] | None = None
    input_embeds: list[Any] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    return_logprob: bool | list[bool] = False
    image_data: Any = None  # one image, or a list (cameras); a list of those for a batch
    mm_hashes: Any = None  # hex image hashes, one per image, in the same shape as image_data
    # The fields below hold for every prompt of a batch; GenerateItem has them by the same name.
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    unnorm_key: str | None = None
    num_actions: int | None = None
    priority: int | None = None
    deadline_ms: float | None = None
    control_period_ms: float | None = None
    capture_time: float | None = None
    supersede: bool = False
    session_id: str | None = None
    session_params: SessionParams | None = None
    relaxed_decoding: bool = False
    state: list[float] | None = None
    # Real-time chunking (`guidance_request.py`); in a batch each may be a list, one entry per
    # prompt (`prev_chunk` must be: one chunk or null per prompt).
    prev_chunk: Any = None
    inference_delay: int | list[int | None] | None = None
    execution_horizon: int | list[int | None] | None = None
    rtc: RtcOptions | list[RtcOptions | None] | None = None


MAX_BATCH_ITEMS = 512

_PER_PROMPT = frozenset(
    ("text", "input_ids", "input_embeds", "sampling_params", "rid", "return_logprob")
    + ("image_data", "mm_hashes")
    + ("prev_chunk", "inference_delay", "execution_horizon", "rtc")
)


def parse_body(body: bytes) -> GenerateReqInput:
    return _checked(decode_json(body))


def from_kwargs(**kwargs: Any) -> GenerateReqInput:
    check_int_range(kwargs)
    return _checked(kwargs)


def _checked(raw: Any) -> GenerateReqInput:
    try:
        return msgspec.convert(GENERATE.implemented_fields(raw), GenerateReqInput)
    except msgspec.ValidationError as e:
        raise from_msgspec(e) from None


def normalize(obj: GenerateReqInput, limits: ModelLimits) -> list[GenerateItem]:
    kind, prompts, batch = _prompts(obj, limits.hidden_size)
    n = len(prompts)
    if n == 0:
        raise RequestError("the batch is empty", field=kind)
    check_batch_size(n, kind)
    params = _per_item(obj.sampling_params, n, "sampling_params", batch)
    rids = _rids(obj.rid, n, batch)
    want_lp = _per_item(obj.return_logprob, n, "return_logprob", batch)
    images = _images(obj.image_data, n, batch)
    hashes = _batch_entries(obj.mm_hashes, n, batch, "mm_hashes")
    guidance = _guidance(obj, n, batch)
    listed = isinstance(obj.sampling_params, list)
    shared = {name: getattr(obj, name) for name in obj.__struct_fields__ if name not in _PER_PROMPT}
    items = [
        GenerateItem(
            rid=rids[i],
            sampling_params=parse_sampling(
                params[i], limits, f"sampling_params[{i}]" if listed else "sampling_params"
            ),
            text=prompts[i] if kind == "text" else None,
            input_ids=prompts[i] if kind == "input_ids" else None,
            input_embeds=prompts[i] if kind == "input_embeds" else None,
            images=images[i],
            mm_hashes=hashes[i],
            return_logprob=want_lp[i],
            guidance=guidance[i],
            index=i,
            in_batch=batch,
            **shared,
        )
        for i in range(n)
    ]
    return expand_samples(items, items[0].sampling_params.n, kind)


def _guidance(obj: GenerateReqInput, n: int, batch: bool) -> list[GuidanceAsk | None]:
    """Each prompt's real-time chunking fields, checked."""
    chunks = _batch_entries(obj.prev_chunk, n, batch, "prev_chunk")
    delays = _per_item(obj.inference_delay, n, "inference_delay", batch)
    horizons = _per_item(obj.execution_horizon, n, "execution_horizon", batch)
    options = _per_item(obj.rtc, n, "rtc", batch)
    return [
        guidance_ask(chunks[i], delays[i], horizons[i], options[i], f"[{i}]" if batch else "")
        for i in range(n)
    ]


def check_batch_size(count: int, field: str) -> None:
    """A batch is for a handful of cameras or prompts; thousands in one request would hold
    the node for minutes behind one connection."""
    if count > MAX_BATCH_ITEMS:
        raise RequestError(
            f"{count} generations in one request; at most {MAX_BATCH_ITEMS} (prompts x n): "
            "split the batch",
            field,
        )


def expand_samples(items: list[GenerateItem], n: int, field: str) -> list[GenerateItem]:
    """`n` independent samples of each item, in prompt order (item i's sample j at i * n + j).

    Sample j of a seeded request gets the seed + j: reproducible, and not n copies of one draw.
    """
    if any(it.sampling_params.n != n for it in items):
        raise RequestError("must be the same for every prompt of a batch", "sampling_params.n")
    check_batch_size(len(items) * n, field)
    if n == 1:
        return items
    out: list[GenerateItem] = []
    for it in items:
        seed = it.sampling_params.random_seed
        for j in range(n):
            params = msgspec.structs.replace(
                it.sampling_params,
                n=1,
                seed=None,
                sampling_seed=None if seed is None else seed + j,
            )
            rid = f"{it.rid}-{j}"
            out.append(
                dataclasses.replace(
                    it, rid=rid, sampling_params=params, index=len(out), in_batch=True
                )
            )
    return out


def _prompts(obj: GenerateReqInput, hidden: int) -> tuple[str, list[Any], bool]:
    given = [n for n in ("text", "input_ids", "input_embeds") if getattr(obj, n) is not None]
    if len(given) != 1:
        raise RequestError(
            "exactly one of `text`, `input_ids` or `input_embeds` is required"
            + (f" (got {', '.join(given)})" if given else ""),
            field="text" if not given else given[1],
        )
    kind = given[0]
    value = getattr(obj, kind)
    if kind == "text":
        return kind, [value] if isinstance(value, str) else list(value), isinstance(value, list)
    if kind == "input_ids":
        batch = bool(value) and isinstance(value[0], list)
        prompts = value if batch else [value]
        for i, p in enumerate(prompts):
            _check_ids(p, f"input_ids[{i}]" if batch else "input_ids")
        return kind, prompts, batch
    batch = bool(value) and bool(value[0]) and isinstance(value[0][0], list)
    prompts = value if batch else [value]
    return kind, [_embeds(p, hidden, i, batch) for i, p in enumerate(prompts)], batch


def _check_ids(ids: Any, field: str) -> None:
    if not isinstance(ids, list) or not all(type(t) is int for t in ids):
        raise RequestError("must be a list of integer token ids (or a list of such lists)", field)


def _embeds(p: Any, hidden: int, i: int, batch: bool) -> np.ndarray:
    field = f"input_embeds[{i}]" if batch else "input_embeds"
    try:
        arr = np.asarray(p, dtype=np.float32)
    except (ValueError, TypeError):
        raise RequestError("must be a [num_tokens, hidden_size] list of floats", field) from None
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise RequestError("must be a non-empty [num_tokens, hidden_size] list of floats", field)
    if arr.shape[1] != hidden:
        raise RequestError(
            f"embeddings have width {arr.shape[1]}; the model's hidden size is {hidden}", field
        )
    if not np.isfinite(arr).all():
        raise RequestError("embeddings must be finite", field)
    return arr


def _per_item(value: Any, n: int, field: str, batch: bool) -> list[Any]:
    if isinstance(value, list):
        if not batch:
            raise RequestError("a list is only allowed for a batch of prompts", field)
        if len(value) != n:
            raise RequestError(f"has {len(value)} entries for a batch of {n} prompts", field)
        return value
    return [value] * n


def _batch_entries(value: Any, n: int, batch: bool, field: str) -> list[Any]:
    """Per-prompt entries of a field that is itself a list for one prompt (images, hashes)."""
    if not batch or value is None:
        return [value] * n if not batch else [None] * n
    if not isinstance(value, list) or len(value) != n:
        raise RequestError(f"must be a list with one entry per prompt ({n})", field)
    return value


def _images(value: Any, n: int, batch: bool) -> list[list[Any]]:
    entries = _batch_entries(value, n, batch, "image_data")
    return [[] if e is None else list(e) if isinstance(e, list) else [e] for e in entries]


def _rids(rid: str | list[str] | None, n: int, batch: bool) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(n)]
    if isinstance(rid, str):
        if rid == "":
            raise RequestError("must be a non-empty string", "rid")
        return [rid] if not batch else [f"{rid}-{i}" for i in range(n)]
    rids = _per_item(rid, n, "rid", batch)
    if len(set(rids)) != len(rids) or any(r == "" for r in rids):
        raise RequestError("rids in a batch must be unique and non-empty", "rid")
    return rids


def check_no_stop(item: GenerateItem) -> None:
    """An action request ends after exactly num_actions actions: its sampling is constrained to
    action tokens, so a stop could only cut an action short (and that part would be dropped)."""
    params = item.sampling_params
    for name in ("stop", "stop_token_ids"):
        if getattr(params, name):
            raise RequestError(
                "cannot be combined with num_actions (an action request ends after num_actions "
                "complete actions)",
                f"sampling_params.{name}",
            )
