"""One forward + sample of a scheduled batch on the ModelRunner (the scheduler core's Runner);
runs in the model worker thread.

It reads only the batch and read-only request fields (prompt, images, sampling parameters,
generator, vocabulary mask) and returns a BatchResult; the scheduler applies the result. The
request fields it writes are the prefill's image state (`Req.prefill_images`) and a denoising
request's chunk (`DenoiseState.x`), which the scheduler touches only when no batch of the request is
in flight. A batch's denoising pass runs after its forward, so a prompt prefilled by that
forward is already in the KV pool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from vla_server.io_struct import MMItem
from vla_server.model.denoise import euler_update
from vla_server.model.guidance import Guide, GuideBatch, identity_velocity
from vla_server.model.model_runner import ModelRunner
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.model.parts import ModelParts
from vla_server.model.sampling import (
    SamplingBatchInfo,
    TokenHistory,
    compute_logprobs,
    make_generator,
)
from vla_server.scheduler.denoise_state import DenoiseState
from vla_server.scheduler.image_embedder import ImageEmbedder
from vla_server.scheduler.req import Req
from vla_server.scheduler.schedule_batch import PENDING, BatchResult, ReqLogprobs, ScheduledBatch
from vla_server.scheduler.thread_plan import ThreadPlan


class BatchRunner:
    def __init__(
        self,
        runner: ModelRunner,
        seed: int,
        embedder: ImageEmbedder | None = None,
        eos_token_ids: frozenset[int] = frozenset(),
        threads: ThreadPlan | None = None,
        parts_for: Callable[[str], ModelParts] | None = None,
    ):
        self.runner = runner
        self.parts_for = parts_for  # a folder's family, for weight updates
        self.threads = threads  # None: the process's torch threads for every step
        self._thread = threading.local()  # torch's thread count is the calling thread's own
        self._background_runs = 0  # background lane batches running now (0 or 1)
        self.device = runner.device
        self.embedder = embedder
        self.eos_token_ids = eos_token_ids  # masked until a request's min_new_tokens
        torch.manual_seed(seed)

    def generator_for(self, seed: int | None) -> torch.Generator | None:
        return None if seed is None else make_generator(seed, self.device)

    def update_weights_from_disk(self, model_path: str) -> None:
        if self.parts_for is None:
            raise ValueError("this runner takes no weight updates")
        self.runner.update_weights(self.parts_for(model_path))

    def run_background(self, batch: ScheduledBatch) -> BatchResult:
        """`run` on the background lane's thread (priority isolation): at the decode thread
        count, and meanwhile so are the main lane's steps, so the two lanes' threads never
        outnumber the cores they were planned for."""
        self._thread.background = True
        self._background_runs += 1
        try:
            return self.run(batch)
        finally:
            self._background_runs -= 1

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> BatchResult:
        result = self._forward(batch) if batch.reqs else BatchResult([], [], 0.0)
        if batch.denoise:
            t0 = time.perf_counter()
            self._denoise(batch)
            result.denoise_s = time.perf_counter() - t0
        return result

    def _forward(self, batch: ScheduledBatch) -> BatchResult:
        t0 = time.perf_counter()
        tokens = self._resolve_pending(batch)
        self._set_threads(len(tokens), sum(len(t) for t in tokens), streams=any(batch.sample))
        embeds, mask = self._embeds(batch, tokens)
        fb = self.runner.build_forward_batch(
            batch.rows,
            batch.prefix_lens,
            tokens,
            batch.slots,
            input_embeds=embeds,
            input_embeds_mask=mask,
            prefix_lm_lens=[r.prefix_lm_len for r in batch.reqs],
            position_shifts=[r.position_shift for r in batch.reqs],
        )
        logits = self.runner.forward(fb, batch.prompt_spans, next_token_logits=any(batch.sample))
        logprobs: list[ReqLogprobs | None] = [
            self._prompt_logprobs(batch, i, logits.prompt_logits[i]) for i in range(len(batch.reqs))
        ]
        next_ids = [PENDING] * len(batch.reqs)
        rows = [i for i, s in enumerate(batch.sample) if s]
        if rows:
            self._sample(batch, rows, tokens, logits.next_token_logits, next_ids, logprobs)
        return BatchResult(next_ids, logprobs, time.perf_counter() - t0)

    def _denoise(self, batch: ScheduledBatch) -> None:
        """`batch.denoise_steps` Euler steps of every denoising request, back to back, over
        prefixes gathered from the pool once (several steps: a lone robot's batch)."""
        chunks = [r.denoise for r in batch.denoise if r.denoise is not None]
        dev = self.device
        x = torch.cat([c.x.to(dev) for c in chunks])
        states = [c.state for c in chunks if c.state is not None]
        state = torch.cat(states).to(dev) if states else None
        self._set_threads(len(chunks), x.shape[0] * x.shape[1], streams=False)
        prefix = self.runner.paged_prefix(batch.denoise_rows, batch.denoise_prefix_lens)
        for step in range(batch.denoise_steps):
            times = torch.tensor([t[step] for t in batch.denoise_times], dtype=torch.float32)
            x = self._euler_step(batch, chunks, prefix, x, times.to(dev), state)
        for i, c in enumerate(chunks):
            c.x = x[i : i + 1]

    def _euler_step(
        self,
        batch: ScheduledBatch,
        chunks: list[DenoiseState],
        prefix: PagedPrefix,
        x: torch.Tensor,
        times: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        """One Euler step of every row, in one expert pass (two when some rows take real-time
        chunking guidance through the head's Jacobian: the others, then them). Rows with
        LeRobot's identity guidance share the plain pass and are corrected after it; rows
        without guidance get exactly the plain pass's velocity."""
        vjp = [i for i, c in enumerate(chunks) if c.guide is not None and c.guide.vjp]
        if vjp:
            v = self._velocity_with_vjp(batch, chunks, vjp, x, times, state)
        else:
            v = self.runner.velocity(prefix, x, times, state)
        identity = [i for i, c in enumerate(chunks) if c.guide is not None and not c.guide.vjp]
        if identity:
            rows = torch.tensor(identity, device=x.device)
            guides = GuideBatch.stack([_guide(chunks[i]) for i in identity], x.device)
            v[rows] = identity_velocity(x[rows], v[rows], times[rows], guides)
        return euler_update(x, v, chunks[0].num_steps)

    def _velocity_with_vjp(
        self,
        batch: ScheduledBatch,
        chunks: list[DenoiseState],
        vjp: list[int],
        x: torch.Tensor,
        times: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        """The plain pass over the rows that take no Jacobian, then the vjp pass over those
        that do."""
        v = torch.empty_like(x)
        plain = [i for i in range(len(chunks)) if i not in set(vjp)]
        for part in (plain, vjp):
            if not part:
                continue
            idx = torch.tensor(part, device=x.device)
            rows = [batch.denoise_rows[i] for i in part]
            lens = [batch.denoise_prefix_lens[i] for i in part]
            s = None if state is None else state[idx]
            if part is plain:
                v[idx] = self.runner.denoise(rows, lens, x[idx], times[idx], s)
            else:
                guides = [_guide(chunks[i]) for i in part]
                v[idx] = self.runner.denoise_vjp(rows, lens, x[idx], times[idx], s, guides)
        return v

    def _set_threads(self, requests: int, new_tokens: int, streams: bool = True) -> None:
        """`streams`: some request of the step gets a token from it (`ThreadPlan`)."""
        # Runs on the worker thread whose OpenMP pool the next forward uses.
        if self.threads is None:
            return
        plan, width = self.threads, self.runner.config.hidden_size
        lanes = getattr(self._thread, "background", False) or self._background_runs
        n = plan.decode if lanes else plan.threads_for(requests, new_tokens, streams, width)
        if n != getattr(self._thread, "threads", 0):
            torch.set_num_threads(n)
            self._thread.threads = n

    def _resolve_pending(self, batch: ScheduledBatch) -> list[list[int]]:
        prev, batch.prev = batch.prev, None  # else each batch keeps every earlier one alive
        if prev is None:
            return batch.tokens
        return [
            [prev.sampled[r] if t == PENDING else t for t in toks]
            for r, toks in zip(batch.reqs, batch.tokens, strict=True)
        ]

    def _sample(
        self,
        batch: ScheduledBatch,
        rows: list[int],
        tokens: list[list[int]],
        all_logits: torch.Tensor,
        next_ids: list[int],
        logprobs: list[ReqLogprobs | None],
    ) -> None:
        reqs = [batch.reqs[i] for i in rows]
        info = SamplingBatchInfo.build(
            [r.sampling_params for r in reqs],
            self.runner.vocab_size,
            self.device,
            generators=[r.generator for r in reqs],
            masks=[r.vocab_mask for r in reqs],
            histories=[
                _history(r, batch.prefix_lens[i], tokens[i])
                if r.sampling_params.adjusts_logits
                else None
                for i, r in zip(rows, reqs, strict=True)
            ],
            eos_token_ids=self.eos_token_ids,
        )
        want = [r.top_logprobs_num if r.return_logprob else 0 for r in reqs]
        any_lp = any(r.return_logprob for r in reqs)
        logits = all_logits[rows] if len(rows) != len(batch.reqs) else all_logits
        logits = info.adjusted(logits)
        out = self.runner.sample(logits, info, top_logprobs_nums=want if any_lp else None)
        for j, (i, r) in enumerate(zip(rows, reqs, strict=True)):
            tok = int(out.next_token_ids[j])
            next_ids[i] = tok
            batch.sampled[r] = tok
            if r.return_logprob and out.logprobs is not None:
                lp = logprobs[i] or ReqLogprobs()
                lp.output = (out.logprobs.token_logprobs[j], out.logprobs.top_logprobs[j])
                logprobs[i] = lp

    def _prompt_logprobs(
        self, batch: ScheduledBatch, i: int, logits: torch.Tensor | None
    ) -> ReqLogprobs | None:
        if logits is None:
            return None
        r, targets = batch.reqs[i], batch.prompt_targets[i]
        lp = compute_logprobs(
            logits, torch.tensor(targets, device=logits.device), r.top_logprobs_num
        )
        return ReqLogprobs(None, lp.token_logprobs, targets, lp.top_logprobs)

    def _embeds(
        self, batch: ScheduledBatch, tokens: list[list[int]]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Rows that replace the token embedding: caller embeddings and image features."""
        spans = [
            (r, lo, lo + len(t))
            for r, lo, t in zip(batch.reqs, batch.prefix_lens, tokens, strict=True)
        ]
        if self.embedder is not None:
            # Also for chunks without image positions: it counts the images a prefix covered.
            self.embedder.resolve(spans)
        has_images = any(_overlap(it, lo, hi) for r, lo, hi in spans for it in r.mm_items)
        has_states = any(lo <= _state_position(r) < hi for r, lo, hi in spans)
        if not (has_images or has_states) and all(r.input_embeds is None for r, _, _ in spans):
            return None, None
        assert self.embedder is not None or not has_images
        n = sum(len(t) for t in tokens)
        embeds = torch.zeros((n, self.runner.config.hidden_size), dtype=self.runner.dtype)
        mask = torch.zeros(n, dtype=torch.bool)
        state_rows: list[tuple[int, Req]] = []
        off = 0
        for r, lo, hi in spans:
            if r.input_embeds is not None:  # the prompt is embeddings; outputs are tokens
                b = min(hi, r.input_embeds.shape[0])
                if lo < b:
                    embeds[off : off + b - lo] = r.input_embeds[lo:b]
                    mask[off : off + b - lo] = True
            features = r.prefill_images.features
            for it in r.mm_items:
                a, b = max(lo, it.offset), min(hi, it.offset + it.length)
                if a < b:
                    embeds[off + a - lo : off + b - lo] = features[it.hash][
                        a - it.offset : b - it.offset
                    ]
                    mask[off + a - lo : off + b - lo] = True
            if features:
                r.prefill_images.drop_passed(r.mm_items, hi)
            if lo <= _state_position(r) < hi:
                state_rows.append((off + _state_position(r) - lo, r))
            off += hi - lo
        if state_rows:
            # The state token: the head's embedding of the request's normalised state.
            states = torch.stack([r.wire.state.to_torch().float() for _, r in state_rows])
            rows = torch.tensor([row for row, _ in state_rows])
            embeds[rows] = self.runner.embed_state(states).to(embeds.device, embeds.dtype)
            mask[rows] = True
        return embeds, mask


def _guide(chunk: DenoiseState) -> Guide:
    assert chunk.guide is not None
    return chunk.guide


def _history(r: Req, prefix_len: int, tokens: list[int]) -> TokenHistory:
    """The prompt and the output tokens before the one this step samples.

    The sequence so far ends with this step's new tokens; in overlap mode the last of them may
    still be missing from `output_ids` (sampled by the batch in flight), so it is taken from
    `tokens`, which holds it resolved.
    """
    prompt = r.origin_input_ids
    n_out = prefix_len + len(tokens) - len(prompt)
    out = r.output_ids[:n_out]
    missing = n_out - len(out)
    if missing > 0:
        out = out + tokens[len(tokens) - missing :]
    return TokenHistory(prompt, out)


def _state_position(r: Req) -> int:
    """Where the request's state token sits in its prompt (-1: it has none)."""
    pos = r.wire.state_position
    return -1 if pos is None or r.wire.state is None else pos


def _overlap(item: MMItem, lo: int, hi: int) -> bool:
    return item.offset < hi and lo < item.offset + item.length


def prompt_span(r: Req, prefix_len: int, n_new: int) -> tuple[tuple[int, int] | None, list[int]]:
    """Offsets into this forward's new tokens whose logits score prompt tokens of `r`, and
    the prompt tokens they score.

    Prompt token i (i >= 1) is scored by the logits at position i - 1; the caller asked for
    tokens from `logprob_start_len` on.
    """
    if not r.return_logprob or r.logprob_start_len < 0:
        return None, []
    prompt_len = len(r.origin_input_ids)
    lo = max(max(r.logprob_start_len, 1, r.prompt_scored_upto) - 1, prefix_len)
    hi = min(prompt_len - 1, prefix_len + n_new)
    if lo >= hi:
        return None, []
    return (lo - prefix_len, hi - prefix_len), r.origin_input_ids[lo + 1 : hi + 1]
