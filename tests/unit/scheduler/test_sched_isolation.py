"""Priority isolation on the scheduling core (`--realtime-priority`): while a protected request
runs, less important ones join its steps only where the step-time model predicts no slowdown,
else they are held (keeping their KV) and forced into a step once `--max-hold-ms` has passed.

The fake model's step time is 10 ms plus `token_s` per token: 2 ms (CPU-like, every row costs)
or 0 (GPU-like, a bigger batch is free). The fake clock moves on by each step's time, so the
hold bound is checked exactly, with no sleeping."""

from __future__ import annotations

import pytest

from tests.support.sched_fakes import Harness, reference
from vla_server.io_struct import GetInternalStateReq

CPU_TOKEN_S = 0.002
HOLD_MS = 50.0
LOW_NEW = 60
LOWS = {f"low-{i}": [20 + i, 31, 47, 52 + i, 60] for i in range(4)}
HIGH = [50, 51, 52, 7, 9]


def iso_harness(token_s: float = CPU_TOKEN_S, *, low_first: bool = False, **cfg) -> Harness:
    cfg = {"realtime_priority": 0 if low_first else 100} | cfg
    return Harness(
        enable_priority_scheduling=True,
        schedule_low_priority_values_first=low_first,
        max_running_requests=8,
        max_hold_ms=HOLD_MS,
        token_s=token_s,
        **cfg,
    )


def start_lows(h: Harness, priority: int, n: int = LOW_NEW) -> None:
    for rid, ids in LOWS.items():
        h.submit(rid, ids, n, priority=priority, stream=True)
    h.step(3)
    assert h.running() == list(LOWS)


def steps_of(h: Harness, rid: str) -> list[int]:
    return [i for i, b in enumerate(h.runner.batches) if any(r.rid == rid for r in b.reqs)]


def assert_all_as_alone(h: Harness, highs: dict[str, list[int]], high_new: int) -> None:
    h.assert_clean()
    for rid, ids in LOWS.items():
        assert h.out[rid].ids == reference(ids, LOW_NEW), rid
        assert h.out[rid].finish_type == "length"
    for rid, ids in highs.items():
        assert h.out[rid].ids == reference(ids, high_new), rid


@pytest.mark.parametrize(
    ("low_first", "low", "high"), [(False, 0, 100), (True, 50, 0)], ids=["high", "low-values"]
)
def test_isolation_holds_lows_and_releases_each_after_max_hold(low_first, low, high):
    h = iso_harness(low_first=low_first)
    start_lows(h, low)
    h.submit("high", HIGH, 16, priority=high, stream=True)
    h.run()
    hold_s, times = HOLD_MS / 1e3, h.batch_times
    longest_step = max(h.runner.cost(b) for b in h.runner.batches)
    high_steps = steps_of(h, "high")
    for rid in LOWS:
        mine = steps_of(h, rid)
        for prev, cur in zip(mine, mine[1:], strict=False):
            if high_steps[0] <= cur <= high_steps[-1]:
                gap = times[cur] - times[prev]
                # held until due (every row costs here), then forced in at the next step built
                assert hold_s <= gap < hold_s + longest_step, (rid, cur, gap)
    # the lows were held out of most of the high's steps
    alone = [i for i in high_steps if len(h.runner.batches[i].reqs) == 1]
    assert len(alone) > len(high_steps) // 2
    held = h.core.state.held_steps
    assert held > 0 and h.core.stats().held_steps == held
    state = h.control(GetInternalStateReq).data
    assert state["held_steps"] == held
    assert_all_as_alone(h, {"high": HIGH}, 16)


def test_isolation_lets_free_rows_join_once_measured():
    """GPU-like: more rows cost nothing. Once the model has seen the protected step alone, every
    low request rides along in every step of the high one. With overlap a step's time is known
    one step later, so the high request runs alone twice at most."""
    h = iso_harness(token_s=0.0)
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    h.run()
    high_steps = steps_of(h, "high")
    learned = [i for i in high_steps if len(h.runner.batches[i].reqs) == 1]
    assert len(learned) <= 2
    later = [i for i in high_steps if not learned or i > learned[-1]]
    assert all(len(h.runner.batches[i].reqs) == 1 + len(LOWS) for i in later)
    assert h.core.state.held_steps <= 2 * len(LOWS)
    assert_all_as_alone(h, {"high": HIGH}, 16)


def test_isolation_off_never_holds():
    h = iso_harness(realtime_priority=None)
    start_lows(h, 0)
    h.submit("high", HIGH, 16, priority=100, stream=True)
    h.run()
    assert all(len(h.runner.batches[i].reqs) == 5 for i in steps_of(h, "high")[1:])
    assert h.core.state.held_steps == 0
    assert_all_as_alone(h, {"high": HIGH}, 16)


def test_isolation_no_starvation_under_a_continuous_realtime_stream():
    """A new high request as soon as the previous one ends: the lows still finish, at one step
    per hold at least, with the outputs they have alone."""
    h = iso_harness()
    start_lows(h, 0)
    highs: dict[str, list[int]] = {}
    for _ in range(20_000):
        if all(h.out.ended(rid) for rid in LOWS):
            break
        if not highs or h.out.ended(f"high-{len(highs) - 1}"):
            rid, ids = f"high-{len(highs)}", [60 + len(highs) % 50, 3, 9]
            highs[rid] = ids
            h.submit(rid, ids, 6, priority=100, stream=True)
        h.step()
    else:
        raise AssertionError(f"the lows starved: {h.core.stats()}")
    h.run()
    assert len(highs) > 1 and h.core.state.held_steps > 0
    assert_all_as_alone(h, highs, 6)


def test_isolation_realtime_chunk_goes_before_low_chunks():
    """With a chunk budget of 8 and long low prompts still prefilling, the high request's first
    chunk takes the whole budget in the next step."""
    h = iso_harness(chunked_prefill_size=8)
    long_lows = {rid: ids * 8 for rid, ids in LOWS.items()}
    for rid, ids in long_lows.items():
        h.submit(rid, ids, 4, stream=True)
    h.step(2)
    h.submit("high", HIGH * 3, 4, priority=100, stream=True)
    h.step()
    batch = h.runner.batches[-1]
    assert [r.rid for r in batch.reqs] == ["high"]
    assert len(batch.tokens[0]) == 8
    h.run()
    h.assert_clean()
    assert h.out["high"].ids == reference(HIGH * 3, 4)
    for rid, ids in long_lows.items():
        assert h.out[rid].ids == reference(ids, 4)
