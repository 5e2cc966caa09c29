"""The TokenizerManager against a fake scheduler and detokenizer on real ipc sockets: a consumer
more than 20 chunks behind logs the backlog warning, and a stream that ends early sends exactly
one abort whichever way it ends (the HTTP path, the Engine path, a cancelled consumer).

The fake scheduler binds the scheduler-input endpoint the TokenizerManager pushes to; the fake
detokenizer pushes outputs into the endpoint the TokenizerManager binds, as the real ones do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from tests.support.tiny_checkpoints import make_llama
from vla_server.config import PortArgs, ServerArgs
from vla_server.errors import RequestError
from vla_server.frontend.generate_request import GenerateItem
from vla_server.frontend.tokenizer_manager import BACKLOG_WARN_CHUNKS, TokenizerManager
from vla_server.io_struct import (
    AbortReq,
    BatchStrOutput,
    FinishLength,
    FinishReason,
    ModelInfo,
    ReqOutputMeta,
    SchedulerStats,
    TokenizedGenerateReqInput,
    abort,
    encode,
    scheduler_input_decoder,
)
from vla_server.model.sampling import SamplingParams
from vla_server.process_utils import zmq_socket

LIVENESS_S = 30.0  # bound on waiting for a message that must come; never a timing assertion
MARKER = AbortReq(abort_all=True)  # sent last: the ring is ordered, so all before it has come


class Ring:
    """A TokenizerManager on fresh ipc endpoints, and the two peers it talks to."""

    def __init__(self, tmp_path: Path):
        self.port_args = PortArgs.init_new()
        folder = make_llama()
        config = ServerArgs(model_path=str(folder)).configs().frontend
        self.tm = TokenizerManager(config, self.port_args)
        self.tm.set_model_info(
            ModelInfo(
                family="llava",
                model_path=str(folder),
                architecture="LlamaForCausalLM",
                context_len=512,
                vocab_size=512,
                hidden_size=128,
                max_total_num_tokens=4096,
                device="cpu",
                dtype="float32",
                attention_backend="torch",
            )
        )
        self.ctx = zmq.asyncio.Context()
        self.scheduler = zmq_socket(
            self.ctx, zmq.PULL, self.port_args.scheduler_input_ipc_name, bind=True
        )
        self.detokenizer = zmq_socket(
            self.ctx, zmq.PUSH, self.port_args.tokenizer_ipc_name, bind=False
        )

    async def received(self) -> Any:
        raw = await asyncio.wait_for(self.scheduler.recv(), LIVENESS_S)
        return scheduler_input_decoder.decode(raw)

    async def until_marker(self) -> list[Any]:
        """Everything the TokenizerManager sent up to the marker it is now told to send."""
        self.tm.abort_request(abort_all=True)
        got = []
        while (msg := await self.received()) != MARKER:
            got.append(msg)
        return got

    async def emit(self, rid: str, n_tokens: int, finish: FinishReason | None = None) -> None:
        """One output chunk for `rid`, as the detokenizer sends it."""
        out = BatchStrOutput(
            rids=[rid],
            finished_reasons=[finish],
            output_strs=["x" * n_tokens],
            output_ids=[[7] * n_tokens],
            metas=[ReqOutputMeta(prompt_tokens=2, completion_tokens=n_tokens, cached_tokens=0)],
            logprobs=[None],
            stats=SchedulerStats(1, 0, 0, 512),
        )
        await self.detokenizer.send(encode(out))

    def close(self) -> None:
        self.ctx.destroy(linger=0)
        self.tm.close()
        self.port_args.cleanup()


@pytest.fixture
async def ring(tmp_path: Path) -> AsyncIterator[Ring]:
    r = Ring(tmp_path)
    try:
        yield r
    finally:
        r.close()


async def _started_stream(ring: Ring, rid: str) -> tuple[AsyncIterator[Any], dict[str, Any]]:
    """A dispatched streaming request that has yielded its first chunk."""
    item = GenerateItem(rid, SamplingParams(max_new_tokens=100), input_ids=[5, 6], stream=True)
    gen = ring.tm.generate_request([item])
    first = asyncio.ensure_future(gen.__anext__())
    sent = await ring.received()
    assert isinstance(sent, TokenizedGenerateReqInput) and sent.rid == rid
    await ring.emit(rid, 1)
    return gen, await asyncio.wait_for(first, LIVENESS_S)


async def _queued(ring: Ring, rid: str, n: int) -> None:
    """Until `n` chunks wait for a consumer that is not reading."""
    deadline = time.monotonic() + LIVENESS_S
    while len(ring.tm.rid_to_state[rid].out_list) < n:
        assert time.monotonic() < deadline, "the outputs never reached the request"
        await asyncio.sleep(0.001)


def _aborts(msgs: list[Any], rid: str) -> int:
    return sum(isinstance(m, AbortReq) and m.rid == rid and not m.abort_all for m in msgs)


@pytest.mark.parametrize("behind", [20, 21])
async def test_backlog_warning_only_past_20_chunks(ring, caplog, behind):
    assert BACKLOG_WARN_CHUNKS == 20  # the number: "more than 20 chunks behind"
    gen, _ = await _started_stream(ring, "slow")
    for _ in range(behind):
        await ring.emit("slow", 1)
    await _queued(ring, "slow", behind)
    caplog.set_level(logging.WARNING, logger="vla_server.frontend.tokenizer_manager")
    merged = await gen.__anext__()
    assert len(merged["output_ids"]) == behind  # all queued chunks came as one
    logged = [r.getMessage() for r in caplog.records if "streaming backlog" in r.getMessage()]
    if behind > 20:
        assert len(logged) == 1 and f"{behind} chunks queued for rid slow" in logged[0], logged
    else:
        assert logged == []
    await ring.emit("slow", 1, FinishLength(behind + 2))
    assert (await gen.__anext__())["meta_info"]["finish_reason"]["type"] == "length"


async def _end_like_http(gen: Any, tm: TokenizerManager, rid: str) -> None:
    # http_server._stream's finally: abort synchronously, then close the generator.
    tm.abort_if_pending([rid])
    await gen.aclose()
    tm.abort_if_pending([rid])  # a second pass (another finally) must not abort again


async def _end_like_engine(gen: Any, tm: TokenizerManager, rid: str) -> None:
    await gen.aclose()  # Engine._iter_stream's finally


async def _end_by_cancel(gen: Any, tm: TokenizerManager, rid: str) -> None:
    waiting = asyncio.ensure_future(gen.__anext__())
    await asyncio.sleep(0)  # let it reach its wait for output
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    tm.abort_if_pending([rid])
    await gen.aclose()


@pytest.mark.parametrize("end", [_end_like_http, _end_like_engine, _end_by_cancel])
async def test_a_stream_ended_early_sends_exactly_one_abort(ring, end):
    gen, _ = await _started_stream(ring, "gone")
    await end(gen, ring.tm, "gone")
    assert _aborts(await ring.until_marker(), "gone") == 1
    # the scheduler's echo of the abort is what removes the request's state
    assert "gone" in ring.tm.rid_to_state
    await ring.emit("gone", 0, abort())
    deadline = time.monotonic() + LIVENESS_S
    while "gone" in ring.tm.rid_to_state:
        assert time.monotonic() < deadline, "the abort's echo never removed the state"
        await asyncio.sleep(0.001)
    assert _aborts(await ring.until_marker(), "gone") == 0


async def test_a_finished_stream_sends_no_abort(ring):
    gen, _ = await _started_stream(ring, "done")
    await ring.emit("done", 1, FinishLength(2))
    assert (await gen.__anext__())["meta_info"]["finish_reason"]["type"] == "length"
    ring.tm.abort_if_pending(["done"])
    await gen.aclose()
    assert _aborts(await ring.until_marker(), "done") == 0


async def test_marked_dead_from_the_watchdog_thread_a_stream_and_new_requests_fail_with_503(ring):
    gen, _ = await _started_stream(ring, "stuck")
    reason = "scheduler process (pid 4242) hung: no heartbeat for 3.1 s (--watchdog-timeout 3 s)"
    await asyncio.to_thread(ring.tm.mark_dead_threadsafe, reason)
    assert ring.tm.dead_reason == reason  # what /health answers, set before the loop runs
    with pytest.raises(RequestError) as in_flight:
        await asyncio.wait_for(gen.__anext__(), LIVENESS_S)
    item = GenerateItem("new", SamplingParams(max_new_tokens=1), input_ids=[5])
    with pytest.raises(RequestError) as new:
        await anext(ring.tm.generate_request([item]))
    for err in (in_flight.value, new.value):
        assert err.status_code == 503 and reason in err.message
