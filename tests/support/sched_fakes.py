"""A SchedulerCore on a fake model, for the scheduling-rule tests: no process, no weights, no
sleeping.

The fake model is deterministic and reads its context back through the KV table, as a real
one does: writing a token stores, in its KV slot, a hash of the whole sequence up to and
including it (and the position, checked on every read); the logits after a token come from
that hash. So a request whose row points at the wrong slots (a bad prefix match, a slot freed
under it) produces different tokens, and `reference()` gives, independently of the scheduler,
the exact greedy output of a prompt run alone. The logits of token v are -((v - target) mod V):
the target wins by a margin of 1 and, under a vocabulary mask, the first allowed token at or
after it wins.

The real BatchRunner drives the fake model (pending-token resolution, sampling, logprobs); its
measured forward time is replaced by a fixed step time, and the harness's clock advances by
that step time every step, so deadline predictions are exact.

Its denoising pass (pi0 / pi0.5) reads each request's prompt back through the KV table the same
way and returns a velocity that is constant over the chunk: `prompt_velocity` of the prompt's
hash, plus the sum of pi0's state. Every pass is recorded as (prompt hash, t) per row.
"""

from __future__ import annotations

import dataclasses
import zlib
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import count
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from vla_server.config import SchedulerConfig, ServerArgs
from vla_server.io_struct import (
    AbortReq,
    BatchTokenIDOutput,
    ReqOutputMeta,
    RpcReply,
    SessionParams,
    TokenizedGenerateReqInput,
    finish_json,
)
from vla_server.mem_cache.kv_pool import ReqToTokenPool, TokenToKVPool
from vla_server.model.guidance import Guide, GuideBatch, vjp_velocity
from vla_server.model.model_runner import REQ_POOL_SPARE_ROWS, LogitsOutput, SampleOutput
from vla_server.model.sampling import SamplingBatchInfo, SamplingParams, compute_logprobs, sample
from vla_server.policies.base import HeadSpec
from vla_server.scheduler.batch_runner import BatchRunner
from vla_server.scheduler.core import SchedulerCore
from vla_server.scheduler.finish_check import FinishChecker
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.schedule_batch import BatchResult, ScheduledBatch
from vla_server.scheduler.sessions import SessionController

VOCAB = 64
BOS = 1
EOS = 2
STEP_S = 0.01  # the fake forward time of every batch
M64 = (1 << 64) - 1
ROOT = 0x243F6A8885A308D3  # the hash of the empty sequence


def mix(h: int, token: int, salt: int = 0) -> int:
    """The hash of a sequence extended by `token` (splitmix64's finaliser)."""
    x = (h ^ ((token + 1) * 0x9E3779B97F4A7C15 + salt)) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def pick(h: int, mask: torch.Tensor | None = None) -> int:
    """The greedy token after a sequence of hash `h`."""
    target = h % VOCAB
    if mask is None:
        return target
    return next(v % VOCAB for v in range(target, target + VOCAB) if mask[v % VOCAB])


def prompt_hash(prompt: list[int], salt: int = 0) -> int:
    h = ROOT
    for t in prompt:
        h = mix(h, t, salt)
    return h


def prompt_velocity(h: int) -> float:
    """The fake expert's velocity over the chunk of a prompt of hash `h`."""
    return (h % 1000) / 1000.0


def reference(
    prompt: list[int], n: int, *, salt: int = 0, mask: torch.Tensor | None = None
) -> list[int]:
    """The fake model's greedy output for `prompt`, run alone."""
    h = prompt_hash(prompt, salt)
    out = []
    for _ in range(n):
        out.append(pick(h, mask))
        h = mix(h, out[-1], salt)
    return out


def salt_of(model_path: str) -> int:
    """'Weights' loaded from `model_path`: a salt that changes every output."""
    return zlib.crc32(model_path.encode())


class FakeModel:
    """The ModelRunner surface BatchRunner uses, over real KV pools of `pool` tokens."""

    def __init__(self, pool: int, rows: int, context_len: int):
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.vocab_size = VOCAB
        self.config = SimpleNamespace(hidden_size=1)
        self.req_to_token_pool = ReqToTokenPool(rows, context_len)
        self.kv_pool = TokenToKVPool(pool, 1, 1, 1, torch.float32)
        self.salt = 0
        self.slots: dict[int, tuple[int, int]] = {}  # KV slot -> (position, sequence hash)
        self._offsets = torch.arange(VOCAB)
        self.denoise_passes: list[list[tuple[int, float]]] = []  # per pass: (hash, t) per row
        self.vjp_passes = 0  # of them, passes with the Jacobian (`denoise_vjp`)

    def build_forward_batch(
        self,
        rows: list[int],
        prefix_lens: list[int],
        tokens: list[list[int]],
        out_loc: torch.Tensor,
        **_: Any,
    ) -> list[list[int]]:
        """Write each new token's hash into its slot; returns the hashes per request."""
        table = self.req_to_token_pool.req_to_token
        hashes, off = [], 0
        for row, lo, toks in zip(rows, prefix_lens, tokens, strict=True):
            slots = out_loc[off : off + len(toks)]
            off += len(toks)
            table[row, lo : lo + len(toks)] = slots.to(table.dtype)
            h = ROOT if lo == 0 else self._read(int(table[row, lo - 1]), lo - 1)
            row_hashes = []
            for j, (t, slot) in enumerate(zip(toks, slots.tolist(), strict=True)):
                h = mix(h, t, self.salt)
                self.slots[slot] = (lo + j, h)
                row_hashes.append(h)
            hashes.append(row_hashes)
        return hashes

    def _read(self, slot: int, pos: int) -> int:
        stored_pos, h = self.slots[slot]
        assert stored_pos == pos, f"slot {slot} holds position {stored_pos}, read as {pos}"
        return h

    def _logits(self, hashes: list[int]) -> torch.Tensor:
        targets = torch.tensor([h % VOCAB for h in hashes])
        return -((self._offsets[None, :] - targets[:, None]) % VOCAB).float()

    def forward(
        self, hashes: list[list[int]], spans: list[tuple[int, int] | None], **_: Any
    ) -> Any:
        prompt = [
            None if span is None else self._logits(hs[span[0] : span[1]])
            for hs, span in zip(hashes, spans, strict=True)
        ]
        return LogitsOutput(self._logits([hs[-1] for hs in hashes]), prompt)

    def sample(
        self, logits: torch.Tensor, info: SamplingBatchInfo, top_logprobs_nums: Any = None
    ) -> SampleOutput:
        ids = sample(logits, info)
        if top_logprobs_nums is None:
            return SampleOutput(ids, None)
        return SampleOutput(ids, compute_logprobs(logits, ids, top_logprobs_nums))

    def update_weights(self, parts: FakeParts) -> None:
        self.salt = salt_of(parts.folder)

    def denoise(
        self,
        rows: list[int],
        prefix_lens: list[int],
        x: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        table = self.req_to_token_pool.req_to_token
        v = torch.empty_like(x)
        seen = []
        for i, (row, n) in enumerate(zip(rows, prefix_lens, strict=True)):
            h = self._read(int(table[row, n - 1]), n - 1)
            seen.append((h, float(time[i])))
            v[i] = prompt_velocity(h) + (0.0 if state is None else float(state[i].sum()))
        self.denoise_passes.append(seen)
        return v

    def paged_prefix(self, rows: list[int], prefix_lens: list[int]) -> SimpleNamespace:
        return SimpleNamespace(rows=list(rows), lens=list(prefix_lens))

    def velocity(
        self, prefix: SimpleNamespace, x: torch.Tensor, time: torch.Tensor, state: Any = None
    ) -> torch.Tensor:
        return self.denoise(prefix.rows, prefix.lens, x, time, state)

    def denoise_vjp(
        self,
        rows: list[int],
        prefix_lens: list[int],
        x: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
        guides: list[Guide],
    ) -> torch.Tensor:
        """`ModelRunner.denoise_vjp` on the fake velocity (constant in x: its Jacobian is 0, so
        the vjp guidance equals the identity's); its pass is recorded like any other."""
        self.vjp_passes += 1
        with torch.inference_mode(False), torch.enable_grad():
            t = time.clone()
            return vjp_velocity(
                lambda z: self.denoise(rows, prefix_lens, z, t, state),
                x.clone(),
                t,
                GuideBatch.stack(guides, self.device),
            )


@dataclass(frozen=True)
class FakeParts:
    """A folder's model parts, as far as the fake model reads them."""

    folder: str


class FakeRunner(BatchRunner):
    """The real BatchRunner on the fake model, with a fixed forward time (plus `token_s` per
    token of the batch: a CPU-like cost; 0, as on a GPU at small batches, by default)."""

    def __init__(self, model: FakeModel, step_s: float = STEP_S, token_s: float = 0.0):
        super().__init__(model, seed=0, parts_for=FakeParts)  # type: ignore[arg-type]
        self.step_s = step_s
        self.token_s = token_s
        self.batches: list[ScheduledBatch] = []  # every batch run, in order
        self.background_batches: list[ScheduledBatch] = []  # the background lane's, in order

    def cost(self, batch: ScheduledBatch) -> float:
        return self.step_s + self.token_s * batch.num_tokens

    def cost_of_one(self) -> float:
        """The time of a one-token step."""
        return self.step_s + self.token_s

    def run(self, batch: ScheduledBatch) -> BatchResult:
        if not getattr(self._thread, "background", False):
            self.batches.append(batch)
        result = super().run(batch)
        result.forward_s = self.cost(batch)
        return result

    def run_background(self, batch: ScheduledBatch) -> BatchResult:
        self.background_batches.append(batch)
        try:
            return super().run_background(batch)
        finally:  # an inline lane runs on the scheduler's thread, which stays the main lane's
            self._thread.background = False


class InlineExecutor(Executor):
    """Runs each submitted call at once, on the caller's thread: a background lane whose step
    is done by the time the scheduler looks (the fake clock stands still meanwhile)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class FakeTokenizer:
    """Token v decodes to '<v>' (stop strings)."""

    @staticmethod
    def decode(ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f"<{i}>" for i in ids)


class FakeClock:
    def __init__(self, start: float = 1000.0, epoch: float = 1.7e9):
        self.now = start
        self.epoch = epoch

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Result:
    """What a client of one request received, all chunks together."""

    ids: list[int] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    meta: ReqOutputMeta | None = None  # of the last chunk
    queue_steps: int | None = None  # sent once, with the first chunk after the first forward
    chunks: int = 0
    input_logprob_ids: list[int] = field(default_factory=list)
    action_chunk: np.ndarray | None = None  # a denoising request's chunk
    action_chunks_sent: int = 0

    @property
    def finish_type(self) -> str | None:
        return None if self.finish is None else self.finish["type"]


class Collector:
    """The output sink: per-request results, and the order of first tokens and ends."""

    def __init__(self) -> None:
        self.results: dict[str, Result] = {}
        self.events: list[tuple[str, str]] = []  # (rid, "first" | "end")
        self.last: BatchTokenIDOutput | None = None

    def __call__(self, out: BatchTokenIDOutput) -> None:
        self.last = out
        for i, rid in enumerate(out.rids):
            res = self.results.setdefault(rid, Result())
            assert res.finish is None, f"{rid}: output after its end"
            new = out.decode_ids[i][out.read_offsets[i] :]
            if new and not res.ids:
                self.events.append((rid, "first"))
            res.ids += new
            # As clients read it: the JSON the HTTP edge makes of the typed reason.
            res.finish, res.meta = finish_json(out.finished_reasons[i]), out.metas[i]
            if res.meta.queue_steps is not None:
                res.queue_steps = res.meta.queue_steps
            res.chunks += 1
            if out.logprobs[i] is not None:
                res.input_logprob_ids += out.logprobs[i].input_ids
            if out.chunks and out.chunks[i] is not None:
                res.action_chunk = out.chunks[i].to_numpy()
                res.action_chunks_sent += 1
            if res.finish is not None:
                self.events.append((rid, "end"))

    def __getitem__(self, rid: str) -> Result:
        return self.results[rid]

    def ended(self, rid: str) -> bool:
        return rid in self.results and self.results[rid].finish is not None


def sched_config(**overrides: Any) -> SchedulerConfig:
    """The node's default scheduler config with `overrides`."""
    return dataclasses.replace(ServerArgs(model_path="-").configs().scheduler, **overrides)


def greedy(n: int, **extra: Any) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True, **extra)


class Harness:
    """A SchedulerCore on the fake model with a fake clock, collecting its outputs."""

    def __init__(
        self,
        *,
        pool: int = 1024,
        context_len: int = 512,
        threaded: bool = False,
        head: HeadSpec | None = None,
        token_s: float = 0.0,
        prefix_lm: bool = False,
        background: bool = False,
        **cfg: Any,
    ):
        self.cfg = sched_config(**cfg)
        rows = self.cfg.max_running_requests + REQ_POOL_SPARE_ROWS
        self.model = FakeModel(pool, rows, context_len)
        self.kv = KVCacheManager(
            self.model.req_to_token_pool, self.model.kv_pool, self.cfg.disable_radix_cache
        )
        self.clock = FakeClock()
        self.out = Collector()
        self.runner = FakeRunner(self.model, token_s=token_s)
        self.batch_times: list[float] = []  # the clock when each batch was built (unthreaded)
        self.worker = ThreadPoolExecutor(1) if threaded else None
        self.core = SchedulerCore(
            self.cfg,
            self.kv,
            self.runner,
            self.out,
            sessions=SessionController(
                self.kv.tree, self.cfg.max_session_held_tokens, BOS, self.clock.monotonic
            ),
            finish_checker=FinishChecker(FakeTokenizer(), {EOS}),
            context_len=context_len,
            head=head,
            prefix_lm=prefix_lm,
            clock=self.clock,
            worker=self.worker,
            background=InlineExecutor() if background else None,
        )
        self._call_ids = count(1)

    # ---- requests ----------------------------------------------------------------------------

    def submit(
        self,
        rid: str,
        ids: list[int],
        n: int = 8,
        *,
        sampling: SamplingParams | None = None,
        session: dict[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        """A client request; the clock moves on a millisecond first (distinct arrivals)."""
        self.clock.advance(1e-3)
        self.core.handle_generate(
            TokenizedGenerateReqInput(
                rid=rid,
                input_ids=list(ids),
                sampling_params=sampling or greedy(n),
                session_params=None if session is None else SessionParams(**session),
                **fields,
            )
        )

    def abort(self, rid: str = "", abort_all: bool = False) -> None:
        self.core.handle_abort(AbortReq(rid=rid, abort_all=abort_all))

    def control(self, msg_type: type, **fields: Any) -> RpcReply:
        return self.core.handle_control(msg_type(call_id=next(self._call_ids), **fields))

    # ---- running -----------------------------------------------------------------------------

    def step(self, n: int = 1) -> None:
        """`n` scheduler steps; the clock moves on by each one's forward time (by the fixed
        step time when none ran, or in threaded mode when it has not run yet)."""
        for _ in range(n):
            ran = len(self.runner.batches)
            self.core.step()
            new = self.runner.batches[ran:]
            self.batch_times += [self.clock.now] * len(new)
            self.clock.advance(self.runner.cost(new[-1]) if new else self.runner.step_s)

    def run(self, max_steps: int = 20_000) -> None:
        """Step until nothing is left (a liveness bound counted in steps)."""
        for _ in range(max_steps):
            if self.core.is_idle():
                return
            self.step()
        raise AssertionError(f"not idle after {max_steps} steps: {self.core.stats()}")

    def run_until(self, pred: Any, what: str, max_steps: int = 20_000) -> None:
        for _ in range(max_steps):
            if pred():
                return
            self.step()
        raise AssertionError(f"never {what} in {max_steps} steps: {self.core.stats()}")

    # ---- state -------------------------------------------------------------------------------

    def running(self) -> list[str]:
        return [r.rid for r in self.core.state.running]

    def waiting(self) -> list[str]:
        return [r.rid for r in self.core.state.waiting]

    def assert_clean(self) -> None:
        """Idle, every request answered, no KV held (cached prefixes are free to evict)."""
        assert self.core.is_idle()
        assert self.kv.used_tokens() == 0, self.core.stats()
        assert self.kv.free_rows() == self.model.req_to_token_pool.max_requests
        assert all(r.finish is not None for r in self.out.results.values())

    def close(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
