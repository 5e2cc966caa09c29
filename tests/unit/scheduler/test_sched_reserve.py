"""A control loop's next frame (`--realtime-reserve-ms`): when protected requests arrive at a
steady period, the scheduler keeps the window around the next expected arrival clear of other
requests' steps, so the frame does not wait for a step already running.

On the scheduling core with a fake clock (see `test_sched_isolation.py`): a step costs 1 ms
plus 4 ms per token (CPU-like), so four low-priority streams decode in 17 ms steps, and an idle
scheduler ticks every 1 ms. A protected robot sends a short request every 100 ms; a frame's wait
is the time from its send to the first step that carries it."""

from __future__ import annotations

import pytest

from tests.support.sched_fakes import Harness, reference
from tests.unit.scheduler.test_sched_isolation import (
    HOLD_MS,
    LOWS,
    iso_harness,
    start_lows,
    steps_of,
)
from vla_server.config import ServerArgs
from vla_server.io_struct import GetInternalStateReq
from vla_server.scheduler.arrival_rhythm import ArrivalRhythm
from vla_server.scheduler.step_cost import StepCostModel

PERIOD_S = 0.1
LOW_NEW = 120
FRAMES = 12
LEARNED = 6  # frames after which the rhythm's gaps all come from reserved arrivals


def control_loop(reserve_ms: float) -> tuple[Harness, list[float]]:
    h = iso_harness(token_s=0.004, realtime_reserve_ms=reserve_ms)
    h.runner.step_s = 0.001
    start_lows(h, 0, n=LOW_NEW)
    waits, send = [], h.clock.now
    for i in range(FRAMES):
        send += PERIOD_S
        while h.clock.now < send:
            h.step()
        rid = f"frame-{i}"
        h.submit(rid, [60 + i, 3, 9], 2, priority=100, stream=True)
        h.run_until(lambda rid=rid: steps_of(h, rid), f"{rid} started")
        waits.append(h.batch_times[steps_of(h, rid)[0]] - send)
    h.run()
    return h, waits


def test_reserving_clears_the_window_of_the_next_frame():
    plain, plain_waits = control_loop(0.0)
    reserved, waits = control_loop(10.0)
    # Without reserving, a frame lands in a running 17 ms step; with it, on an idle scheduler
    # (the submit's 1 ms and an idle tick of 1 ms).
    assert max(plain_waits[LEARNED:]) > 0.008
    assert max(waits[LEARNED:]) <= 0.0025, waits
    assert reserved.core.state.held_steps > plain.core.state.held_steps
    period_ms = reserved.control(GetInternalStateReq).data["realtime_period_ms"]
    assert abs(period_ms - PERIOD_S * 1e3) < 1.5


def test_reserved_lows_are_held_not_starved_and_answer_as_alone():
    h, _ = control_loop(10.0)
    hold_s, times = HOLD_MS / 1e3, h.batch_times
    longest = max(h.runner.cost(b) for b in h.runner.batches)
    for rid, ids in LOWS.items():
        mine = steps_of(h, rid)
        assert max(times[b] - times[a] for a, b in zip(mine, mine[1:], strict=False)) < (
            hold_s + longest
        ), rid
        assert h.out[rid].ids == reference(ids, LOW_NEW), rid
    for i in range(FRAMES):
        assert h.out[f"frame-{i}"].ids == reference([60 + i, 3, 9], 2)
    h.assert_clean()


def test_the_rhythm_is_the_median_gap_after_three():
    rhythm = ArrivalRhythm()
    for t in (1.0, 1.1, 1.2):
        rhythm.observe(t)
    assert rhythm.next_expected() is None  # two gaps
    rhythm.observe(1.3)
    rhythm.observe(1.3)  # seen before: ignored
    assert abs(rhythm.period() - 0.1) < 1e-9
    rhythm.observe(1.55)  # a dropped frame does not move the median
    assert abs(rhythm.period() - 0.1) < 1e-9
    assert abs(rhythm.next_expected() - 1.65) < 1e-9


def test_tokens_within_a_time():
    model = StepCostModel()
    assert model.tokens_within(1.0) == 0  # nothing measured
    for n in (1, 2, 4, 8, 16, 32):
        model.observe(n, 0.001 + 0.004 * n)
    assert model.tokens_within(0.017) == 4
    assert model.tokens_within(0.0049) == 0
    assert model.tokens_within(0.017, base_tokens=2) == 2


def test_reserving_needs_protected_requests_and_a_length():
    assert ServerArgs(model_path="m").configs().scheduler.realtime_reserve_ms == 0.0
    ok = ServerArgs(model_path="m", realtime_priority=100, realtime_reserve_ms=10.0).configs()
    assert ok.scheduler.realtime_reserve_ms == 10.0
    with pytest.raises(ValueError, match="--realtime-priority"):
        ServerArgs(model_path="m", realtime_reserve_ms=10.0).configs()
    with pytest.raises(ValueError, match="0 \\(off\\) or more"):
        ServerArgs(model_path="m", realtime_priority=100, realtime_reserve_ms=-1.0).configs()
