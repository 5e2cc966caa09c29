"""Owns the decoder, its KV memory and its attention backend; runs one batch at a time.

The scheduler allocates request rows (`req_to_token_pool.alloc()`) and KV slots
(`kv_pool.allocator.alloc(n)`), turns its batch into a `ForwardBatch` with
`build_forward_batch`, then calls `forward` and `sample`. Token bookkeeping (which slots belong
to which request, prefix sharing) stays with the caller.

What the checkpoint has beside the decoder comes from its policy family (`parts.py`): a vision
encoder, and an action head. A checkpoint with an action head prefills its prefix the same way,
then calls `denoise` once per Euler step (`denoise.py`): one head pass over the prefix K/V in the
pool that writes nothing to the pool. Rows guided by real-time chunking with the paper's
Jacobian take `denoise_vjp` instead (`guidance.py`): the same pass under autograd, and its
backward.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, chain
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.attention.base import AttentionBackend
from vla_server.model.attention.registry import create_attention_backend
from vla_server.model.config import ModelConfig, parse_dtype
from vla_server.model.forward_batch import ForwardBatch, ForwardMode
from vla_server.model.guidance import Guide, GuideBatch, vjp_velocity
from vla_server.model.llama import LlamaForCausalLM
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.model.parts import ActionHead, ModelParts, StateTokenHead, VisionEncoder
from vla_server.model.phase_clock import PhaseClock
from vla_server.model.sampling import Logprobs, SamplingBatchInfo, compute_logprobs, sample
from vla_server.model.weight_loader import WeightLoadError, load_decoder_weights

logger = logging.getLogger(__name__)

# Spare request rows beyond max_running_requests, for requests being admitted or retracted.
REQ_POOL_SPARE_ROWS = 4
# Share of the memory that is free after the weights are loaded which goes to the KV pool.
DEFAULT_MEM_FRACTION = {"cpu": 0.25, "cuda": 0.85}


@dataclass
class LogitsOutput:
    # [B, V] float32, after each request's last new token ([0, V] when none were asked for)
    next_token_logits: torch.Tensor
    # Per request: [span_len, V] float32 logits after each token of the requested span of its
    # new tokens (row j predicts the token after new token start + j); None if not requested.
    prompt_logits: list[torch.Tensor | None]


@dataclass
class ModelCounters:
    """What the runner computed, to show that a denoised chunk's prefix runs once per request
    and its action head once per denoising step."""

    vlm_tokens: int = 0  # tokens through the decoder (backbone) stack, by `forward`
    expert_passes: int = 0  # `denoise` calls
    expert_rows: int = 0  # requests summed over `denoise` calls


@dataclass
class SampleOutput:
    next_token_ids: torch.Tensor  # [B] int64
    logprobs: Logprobs | None  # of the raw logits; only when top_logprobs_nums was given


class ModelRunner:
    def __init__(
        self,
        parts: ModelParts,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
        max_total_tokens: int | None = None,
        mem_fraction: float | None = None,
        max_running_requests: int = 64,
        context_len: int | None = None,
        attention_backend: str = "torch",
        progress: bool = True,
    ):
        self.parts = parts
        self.model_path = Path(parts.folder)
        self.device = torch.device(device)
        self.config: ModelConfig = parts.decoder_config()
        self.dtype = self._resolve_dtype(dtype)
        self.context_len = context_len or self.config.context_len
        self.max_running_requests = max_running_requests
        self.progress = progress
        # One position to spare: openpi's convention shifts the tokens after a prefix by one.
        self.model = LlamaForCausalLM(
            self.config,
            dtype=self.dtype,
            device=str(self.device),
            max_positions=self.context_len + 1,
        )
        self.head: ActionHead | None = parts.action_head(
            self.config, self.dtype, self.device, self.context_len
        )
        self._load_decoder_and_head(parts)
        self.counters = ModelCounters()
        self.clock = PhaseClock(self.device)
        # Before the KV pool is sized, so the pool only takes memory the vision weights leave.
        self.vision: VisionEncoder | None = parts.vision_encoder(
            self.config, self.dtype, self.device
        )
        self.req_to_token_pool = ReqToTokenPool(
            max_running_requests + REQ_POOL_SPARE_ROWS, self.context_len, self.device
        )
        self.max_total_tokens = self._kv_pool_size(max_total_tokens, mem_fraction)
        c = self.config
        self.kv_pool = TokenToKVPool(
            self.max_total_tokens, c.num_layers, c.num_kv_heads, c.head_dim, self.dtype, self.device
        )
        self._attention = (attention_backend, self.req_to_token_pool, self.kv_pool, self.device)
        self._lane = threading.local()  # a forward's per-batch attention state, per thread
        self.attn_backend  # noqa: B018 - an unknown backend name fails here, not at a forward

    @property
    def attn_backend(self) -> AttentionBackend:
        """The calling thread's attention backend: it holds one forward's metadata, and the
        background lane (priority isolation) runs forwards beside the model worker's."""
        backend = getattr(self._lane, "backend", None)
        if backend is None:
            backend = self._lane.backend = create_attention_backend(*self._attention)
        return backend

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def _load_decoder_and_head(self, parts: ModelParts) -> None:
        """The decoder's weights and the action head's; both halves are checked against the
        files' headers before anything is copied."""
        layout = parts.decoder_layout()
        if self.head is None:
            load_decoder_weights(self.model, parts.folder, layout, progress=self.progress)
            return
        plan = self.head.plan_weights(parts.folder)
        load_decoder_weights(
            self.model, parts.folder, layout, progress=self.progress, skip=self.head.owns
        )
        self.head.load_weights(plan, progress=self.progress)

    def _resolve_dtype(self, dtype: str | torch.dtype | None) -> torch.dtype:
        if dtype is not None:
            return parse_dtype(dtype)
        return torch.float32 if self.device.type == "cpu" else self.config.dtype

    def _kv_pool_size(self, max_total_tokens: int | None, mem_fraction: float | None) -> int:
        if max_total_tokens is not None:
            if max_total_tokens < 1:
                raise ValueError(f"max_total_tokens must be >= 1, got {max_total_tokens}")
            return max_total_tokens
        fraction = (
            mem_fraction
            if mem_fraction is not None
            else DEFAULT_MEM_FRACTION.get(self.device.type, 0.5)
        )
        c = self.config
        per_token = TokenToKVPool.bytes_per_token(
            c.num_layers, c.num_kv_heads, c.head_dim, self.dtype
        )
        size = int(_free_memory_bytes(self.device) * fraction) // per_token
        # More slots than every running request at full context could ever use is wasted memory.
        size = min(size, self.context_len * self.max_running_requests)
        if size < 1:
            raise ValueError("not enough free memory for a KV pool; pass max_total_tokens")
        if size < self.context_len:
            logger.warning(
                "KV pool holds %d tokens, less than one full context (%d)", size, self.context_len
            )
        return size

    def build_forward_batch(
        self,
        req_pool_indices: Sequence[int],
        prefix_lens: Sequence[int],
        input_ids: Sequence[Sequence[int]],
        out_cache_loc: torch.Tensor | Sequence[int],
        *,
        input_embeds: torch.Tensor | None = None,
        input_embeds_mask: torch.Tensor | Sequence[bool] | None = None,
        prefix_lm_lens: Sequence[int] | None = None,
        position_shifts: Sequence[int] | None = None,
    ) -> ForwardBatch:
        """A batch on the device from plain lists: request i has `prefix_lens[i]` tokens cached in
        row `req_pool_indices[i]` and brings the tokens `input_ids[i]`, whose K/V go to the next
        slots of `out_cache_loc`. Also writes those slots into the rows of `req_to_token`.
        Prefix-LM requests give `prefix_lm_lens[i] > 0` (the bidirectional prefix) and may shift
        the RoPE positions of their later tokens by `position_shifts[i]`."""
        extend_lens = [len(ids) for ids in input_ids]
        seq_lens = [p + n for p, n in zip(prefix_lens, extend_lens, strict=True)]
        self._check_lengths(extend_lens, seq_lens)
        starts = [0, *accumulate(extend_lens)][:-1]
        dev = self.device
        lens = torch.tensor(extend_lens, dtype=torch.int64, device=dev)
        rows = torch.tensor(req_pool_indices, dtype=torch.int64, device=dev)
        prefix = torch.tensor(prefix_lens, dtype=torch.int64, device=dev)
        start_loc = torch.tensor(starts, dtype=torch.int64, device=dev)
        num_tokens = sum(extend_lens)
        first_positions = torch.repeat_interleave(start_loc - prefix, lens)
        index = torch.arange(num_tokens, device=dev) - first_positions
        out_loc = torch.as_tensor(out_cache_loc, dtype=torch.int64, device=dev)
        if out_loc.numel() != num_tokens:
            raise ValueError(f"out_cache_loc has {out_loc.numel()} slots for {num_tokens} tokens")
        table = self.req_to_token_pool.req_to_token
        table[torch.repeat_interleave(rows, lens), index] = out_loc.to(table.dtype)
        mask = None if input_embeds_mask is None else torch.as_tensor(input_embeds_mask, device=dev)
        lm_lens = (
            list(prefix_lm_lens) if prefix_lm_lens is not None and any(prefix_lm_lens) else None
        )
        return ForwardBatch(
            mode=ForwardMode.DECODE if max(extend_lens) == 1 else ForwardMode.EXTEND,
            batch_size=len(extend_lens),
            input_ids=torch.tensor(
                list(chain.from_iterable(input_ids)), dtype=torch.int64, device=dev
            ),
            positions=_shifted(index, lens, lm_lens, position_shifts),
            req_pool_indices=rows,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=dev),
            prefix_lens=prefix,
            extend_lens=lens,
            extend_start_loc=start_loc,
            out_cache_loc=out_loc,
            seq_lens_cpu=seq_lens,
            prefix_lens_cpu=list(prefix_lens),
            extend_lens_cpu=extend_lens,
            input_embeds=None if input_embeds is None else input_embeds.to(dev),
            input_embeds_mask=None if mask is None else mask.bool(),
            prefix_lm_lens=None if lm_lens is None else torch.tensor(lm_lens, device=dev),
            prefix_lm_lens_cpu=lm_lens,
        )

    def _check_lengths(self, extend_lens: list[int], seq_lens: list[int]) -> None:
        if not extend_lens or min(extend_lens) < 1:
            raise ValueError("a batch needs requests, each with at least one new token")
        if max(seq_lens) > self.context_len:
            raise ValueError(
                f"sequence of {max(seq_lens)} tokens exceeds context_len {self.context_len}"
            )

    def work_done(self) -> dict[str, Any]:
        """The counters, and the seconds spent in each phase (`PhaseClock`)."""
        return {**dataclasses.asdict(self.counters), "seconds": self.clock.totals()}

    @torch.inference_mode()
    def forward(
        self,
        batch: ForwardBatch,
        prompt_logprob_spans: Sequence[tuple[int, int] | None] | None = None,
        next_token_logits: bool = True,
    ) -> LogitsOutput:
        """Logits after each request's last new token, and for requests with a span
        `(start, end)` (offsets into that request's new tokens) the logits after each of them.
        `next_token_logits=False` (nothing samples after this forward: a prefill chunk, the
        prompt of a denoised chunk) skips the vocabulary projection of the last tokens ([0, V]
        instead)."""
        self.attn_backend.init_forward_metadata(batch)
        spans = list(prompt_logprob_spans or [None] * batch.batch_size)
        outputs = next_token_logits or any(span is not None for span in spans)
        with self.clock.phase("decoder"):
            hidden = self.model(batch, self.attn_backend, outputs=outputs)
        self.counters.vlm_tokens += batch.num_tokens
        if hidden is None:
            empty = torch.empty((0, self.vocab_size), dtype=torch.float32, device=self.device)
            return LogitsOutput(empty, [None] * batch.batch_size)
        rows = [batch.last_token_index] if next_token_logits else []
        starts = [0, *accumulate(batch.extend_lens_cpu)]
        for i, span in enumerate(spans):
            if span is not None:
                if not 0 <= span[0] <= span[1] <= batch.extend_lens_cpu[i]:
                    raise ValueError(f"prompt logprob span {span} outside request {i}'s new tokens")
                first, last = starts[i] + span[0], starts[i] + span[1]
                rows.append(torch.arange(first, last, device=self.device))
        logits = self.model.compute_logits(hidden[torch.cat(rows)])
        n_next = batch.batch_size if next_token_logits else 0
        next_logits, rest = logits[:n_next], logits[n_next:]
        prompt_logits: list[torch.Tensor | None] = []
        for span in spans:
            n = 0 if span is None else span[1] - span[0]
            prompt_logits.append(None if span is None else rest[:n])
            rest = rest[n:]
        return LogitsOutput(next_logits, prompt_logits)

    @torch.inference_mode()
    def sample(
        self,
        logits: torch.Tensor,
        info: SamplingBatchInfo,
        *,
        top_logprobs_nums: Sequence[int] | None = None,
    ) -> SampleOutput:
        """Next tokens, and logprobs when `top_logprobs_nums` is given (0 = chosen token only)."""
        next_ids = sample(logits, info)
        logprobs = None
        if top_logprobs_nums is not None:
            logprobs = compute_logprobs(logits, next_ids, top_logprobs_nums)
        return SampleOutput(next_ids, logprobs)

    @torch.inference_mode()
    def denoise(
        self,
        rows: Sequence[int],
        prefix_lens: Sequence[int],
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The action head's velocity [B, chunk_size, width] (float32) at the noisy chunks `x_t`
        (same shape, float32) and times `time` [B] (float32), for requests whose prefixes
        (`prefix_lens[i]` tokens) are in the pool in `req_to_token` rows `rows`. One head pass
        for the whole batch; the pool is read, never written. `state` [B, ...]: the requests'
        normalised state, for a head that reads it beside the prefix (None: zeros)."""
        return self.velocity(self.paged_prefix(rows, prefix_lens), x_t, time, state)

    def paged_prefix(self, rows: Sequence[int], prefix_lens: Sequence[int]) -> PagedPrefix:
        """The prefixes `denoise` reads (checked), for `velocity` to read across several steps:
        gathered from the pool once."""
        self._head_for(rows, prefix_lens)
        return PagedPrefix.build(self.req_to_token_pool, self.kv_pool, rows, prefix_lens)

    @torch.inference_mode()
    def velocity(
        self,
        prefix: PagedPrefix,
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`denoise` over prefixes from `paged_prefix`."""
        head = self._action_head()
        dev = self.device
        with self.clock.phase("action_head"):
            velocity = head.velocity(
                prefix,
                x_t.to(dev, torch.float32),
                time.to(dev, torch.float32),
                None if state is None else state.to(dev, torch.float32),
            )
        self._count_pass(prefix.batch_size)
        return velocity

    def denoise_vjp(
        self,
        rows: Sequence[int],
        prefix_lens: Sequence[int],
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
        guides: Sequence[Guide],
    ) -> torch.Tensor:
        """`denoise`'s rows guided by real-time chunking with the paper's Jacobian
        (`guidance.vjp_velocity`): the guided velocity [B, chunk_size, width] (float32). The
        vector-Jacobian product runs through the action head only: the prefix K/V gathered
        from the pool are constants. Autograd needs tensors made outside inference mode (the
        scheduler's step runs in it), so this pass leaves it, and clones its inputs, which may
        have been made in it; the head's weights never require grad. One head pass and its
        backward; counted as one pass."""
        head = self._head_for(rows, prefix_lens)
        dev = self.device
        with torch.inference_mode(False), torch.enable_grad():
            prefix = PagedPrefix.build(self.req_to_token_pool, self.kv_pool, rows, prefix_lens)
            t = time.to(dev, torch.float32).clone()
            s = None if state is None else state.to(dev, torch.float32).clone()
            batch = GuideBatch.stack(guides, dev)
            with self.clock.phase("action_head"):
                velocity = vjp_velocity(
                    lambda x: head.velocity(prefix, x, t, s),
                    x_t.to(dev, torch.float32).clone(),
                    t,
                    batch,
                )
        self._count_pass(len(rows))
        return velocity

    def _head_for(self, rows: Sequence[int], prefix_lens: Sequence[int]) -> ActionHead:
        head = self._action_head()
        if len(rows) != len(prefix_lens) or not rows:
            raise ValueError("denoise needs one prefix length per row, and at least one row")
        if min(prefix_lens) < 1 or max(prefix_lens) > self.context_len:
            raise ValueError(f"prefix lengths must be in [1, {self.context_len}]")
        return head

    def _action_head(self) -> ActionHead:
        if self.head is None:
            raise ValueError(f"{self.model_path} has no action head")
        return self.head

    def _count_pass(self, rows: int) -> None:
        self.counters.expert_passes += 1
        self.counters.expert_rows += rows

    @torch.inference_mode()
    def embed_state(self, state: torch.Tensor) -> torch.Tensor:
        """The prompt embeddings [B, hidden] (the runner's dtype, on its device) of normalised
        states [B, state width], for a head whose state is a prompt token (`StateTokenHead`)."""
        if not isinstance(self.head, StateTokenHead):
            raise ValueError(f"{self.model_path} has no state token in its prompt")
        embeds = self.head.embed_state(state.to(self.device, torch.float32))
        return embeds.to(self.dtype)

    def encode_images(
        self, pixel_values: Sequence[torch.Tensor | np.ndarray]
    ) -> list[torch.Tensor]:
        """Image embeddings: one [num_image_tokens, hidden] tensor (the runner's dtype, on its
        device) per preprocessed image [C, H, W], all in one vision-tower call."""
        if self.vision is None:
            raise ValueError(f"{self.model_path} has no vision encoder")
        if not pixel_values:
            return []
        # One copy into a fresh array: the wire's pixel buffers are read-only.
        pixels = torch.from_numpy(np.stack([np.asarray(p) for p in pixel_values]))
        with self.clock.phase("vision"):
            return self.vision.encode(pixels)

    def update_weights(self, parts: ModelParts) -> None:
        """Swap in the weights of another folder of the same architecture (`parts`: its
        family); on any error the old weights stay."""
        new_config = parts.decoder_config()
        differences = self.config.differences(new_config) + self.parts.differences(parts)
        if differences:
            raise WeightLoadError(
                f"{parts.folder} has a different architecture: " + "; ".join(differences)
            )
        # Checked in full before the decoder changes, so a bad vision or head half changes
        # nothing.
        vision_weights = None if self.vision is None else self.vision.read_weights(parts.folder)
        self._load_decoder_and_head(parts)
        if self.vision is not None and vision_weights is not None:
            self.vision.load_weights(vision_weights)
        self.parts, self.model_path, self.config = parts, Path(parts.folder), new_config


def _shifted(
    index: torch.Tensor,
    lens: torch.Tensor,
    prefix_lm_lens: list[int] | None,
    shifts: Sequence[int] | None,
) -> torch.Tensor:
    """RoPE positions: each token's index, plus its request's shift once past its prefix."""
    if prefix_lm_lens is None or shifts is None or not any(shifts):
        return index
    per_token = torch.repeat_interleave(torch.tensor(shifts, device=index.device), lens)
    ends = torch.repeat_interleave(torch.tensor(prefix_lm_lens, device=index.device), lens)
    return index + per_token * (index >= ends)


def _free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return int(psutil.virtual_memory().available)
