"""Priority isolation past the scheduler: the detokenizer and the main process handle protected
requests' outputs first, and the main process defers other streams while a protected request is
in flight (until the next protected output, `--max-hold-ms`, or no protected one is left).

On fakes (request states, messages on a real zmq pair); no timing thresholds: each check waits
for a state that, once reached, stays."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import zmq

from vla_server.detokenizer.detokenizer_manager import DetokenizerManager
from vla_server.frontend.generate_request import GenerateItem
from vla_server.frontend.req_state import ReqState
from vla_server.frontend.stream_order import StreamOrder
from vla_server.io_struct import (
    BatchTokenIDOutput,
    SchedulerStats,
    encode,
    protected_first,
)
from vla_server.model.sampling import SamplingParams

LIVENESS_S = 30.0  # bound on waiting for what must happen; never a timing assertion
NEVER_S = 1e6  # a hold that never runs out within a test


def state(rid: str, priority: int) -> ReqState:
    item = GenerateItem(rid, SamplingParams(max_new_tokens=4), input_ids=[5], priority=priority)
    return ReqState(item=item, event=asyncio.Event())


def order(states: list[ReqState], hold_s: float = NEVER_S) -> StreamOrder:
    return StreamOrder(lambda st: (st.item.priority or 0) >= 10, hold_s, lambda: states)


async def woken_in_order(states: list[ReqState]) -> tuple[list[str], list[asyncio.Task[None]]]:
    """A task per state waiting on its event, and the list their rids go to as they wake."""
    woke: list[str] = []

    async def wait(st: ReqState) -> None:
        await st.event.wait()
        woke.append(st.rid)

    tasks = [asyncio.create_task(wait(st)) for st in states]
    await asyncio.sleep(0)  # every stream is waiting now
    return woke, tasks


async def test_others_wait_for_the_next_protected_output_and_wake_after_it():
    high, low1, low2 = state("high", 10), state("low1", 0), state("low2", 0)
    so = order([high, low1, low2])
    woke, tasks = await woken_in_order([high, low1, low2])
    so.hand_over([low1, low2], protected=False)
    for _ in range(5):  # however long the loop runs: nothing wakes them but what the rule says
        await asyncio.sleep(0)
    assert woke == [] and not low1.event.is_set() and not low2.event.is_set()
    so.hand_over([high], protected=True)
    await asyncio.wait_for(asyncio.gather(*tasks), LIVENESS_S)
    assert woke == ["high", "low1", "low2"]
    assert so.state()["deferred_outputs"] == 2


async def test_without_a_protected_request_in_flight_nothing_waits():
    low = state("low", 0)
    done = state("high", 10)
    done.finished = True  # a protected request that has ended does not hold anyone back
    so = order([low, done])
    so.hand_over([low], protected=False)
    assert low.event.is_set()
    assert so.state()["deferred_outputs"] == 0


async def test_a_deferred_stream_wakes_after_max_hold_at_the_latest():
    high, low = state("high", 10), state("low", 0)
    so = order([high, low], hold_s=0.01)
    so.hand_over([low], protected=False)
    assert not low.event.is_set()
    await asyncio.wait_for(low.event.wait(), LIVENESS_S)  # the hold ran out: no protected output
    assert so.state()["max_output_defer_ms"] > 9.9  # the timer does not fire early
    assert so.deferred == {}


async def test_a_deferred_stream_is_due_a_hold_after_its_previous_hand_over():
    """The hold counts from the stream's previous output, not from the deferral: a stream that
    already waited a whole hold since then is not deferred further, one just served is."""
    high, waited, fresh = state("high", 10), state("waited", 0), state("fresh", 0)
    so = order([high, waited, fresh])
    waited.handed_over_at = time.perf_counter() - NEVER_S  # a whole hold ago
    fresh.handed_over_at = time.perf_counter()  # just now
    so.hand_over([waited, fresh], protected=False)
    await asyncio.wait_for(waited.event.wait(), LIVENESS_S)
    for _ in range(5):  # however long the loop runs: the fresh one is a whole hold from due
        await asyncio.sleep(0)
    assert not fresh.event.is_set() and list(so.deferred) == [id(fresh)]
    assert so.state()["max_stream_gap_ms"] >= NEVER_S * 1e3


async def test_the_gap_counter_leaves_protected_streams_out():
    high, low = state("high", 10), state("low", 0)
    so = order([low])  # no protected request in flight: nothing is deferred
    high.handed_over_at = low.handed_over_at = time.perf_counter() - 60.0
    so.hand_over([high], protected=True)
    assert so.state()["max_stream_gap_ms"] == 0.0
    so.hand_over([low], protected=False)
    assert so.state()["max_stream_gap_ms"] >= 60_000.0


async def test_the_last_protected_output_releases_everyone_at_once():
    high, low = state("high", 10), state("low", 0)
    in_flight = [high, low]
    so = StreamOrder(lambda st: (st.item.priority or 0) >= 10, NEVER_S, lambda: in_flight)
    so.hand_over([low], protected=False)
    assert not low.event.is_set()
    high.finished = True
    in_flight.remove(high)  # as the TokenizerManager forgets a finished request
    so.hand_over([high], protected=True)
    assert high.event.is_set() and low.event.is_set()  # at once, not on the next loop turn


async def test_without_isolation_every_stream_wakes_at_once():
    high, low = state("high", 10), state("low", 0)
    so = StreamOrder(None, NEVER_S, lambda: [high, low])
    so.hand_over([low], protected=False)
    assert low.event.is_set()


def output(rid: str, protected: bool) -> BatchTokenIDOutput:
    return BatchTokenIDOutput(
        rids=[rid],
        finished_reasons=[None],
        decode_ids=[[7]],
        read_offsets=[0],
        skip_special_tokens=[True],
        stop_strs=[[]],
        metas=[],
        logprobs=[None],
        stats=SchedulerStats(1, 0, 0, 512),
        protected=protected,
    )


def test_protected_messages_go_first_each_group_in_its_order():
    msgs = [output("a", False), output("h1", True), output("b", False), output("h2", True)]
    assert [m.rids[0] for m in protected_first(msgs)] == ["h1", "h2", "a", "b"]


class _Sent:
    def __init__(self) -> None:
        self.count = 0

    def send(self, raw: bytes) -> None:
        self.count += 1


def test_the_detokenizer_serves_what_queued_up_protected_first():
    """Three messages wait on the detokenizer's socket (a real zmq pair, in-process: a sent
    message is queued when `send` returns); it handles the protected one first, then the others
    in arrival order."""
    ctx = zmq.Context()
    try:
        pull = ctx.socket(zmq.PULL)
        pull.bind("inproc://detokenizer-order")
        push = ctx.socket(zmq.PUSH)
        push.connect("inproc://detokenizer-order")
        for rid, protected in (("low1", False), ("high", True), ("low2", False)):
            push.send(encode(output(rid, protected)))
        manager = DetokenizerManager.__new__(DetokenizerManager)
        manager.recv_sock = pull
        manager.send_sock = sent = _Sent()  # type: ignore[assignment]
        handled: list[str] = []

        def handle(msg: BatchTokenIDOutput) -> Any:
            handled.append(msg.rids[0])
            return msg

        manager.handle = handle  # type: ignore[method-assign]
        assert pull.poll(LIVENESS_S * 1000)
        manager.serve_queued()
        assert handled == ["high", "low1", "low2"]
        assert sent.count == 3
    finally:
        ctx.destroy(linger=0)
