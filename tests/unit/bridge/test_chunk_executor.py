"""The action-chunk executor on synthetic chunks (no ROS, no server).

Expected commands are worked out by hand from the documented timing (action i of a frame stamped
s is due at s + (i + 1)·Δ) and from ACT's temporal-ensembling formula (weights exp(-m·i), i = 0
for the oldest chunk); the smoothness bound is the README's, checked on random chunks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ros_bridge.chunk_executor import ChunkExecutor, ExecutorConfig, ExecutorMode
from ros_bridge.late_policy import OnLate

MS = 1_000_000
S0 = 1_700_000_000_000_000_000  # a frame stamp (ns); the chunks' time base
ACTION = 100 * MS  # Δ: 10 Hz actions
CONTROL = 20 * MS  # 50 Hz commands


def make(mode: str, on_late: OnLate = OnLate.HOLD, **kw: object) -> ChunkExecutor:
    config = ExecutorConfig(ExecutorMode(mode), ACTION, CONTROL, on_late=on_late, **kw)  # type: ignore[arg-type]
    return ChunkExecutor(config)


def feed(ex: ChunkExecutor, stamp: int, rows: list[list[float]], received: int = 0) -> None:
    for i, row in enumerate(rows):
        assert ex.add_action(stamp, i, row, received)


def values_at(ex: ChunkExecutor, t: int) -> list[float]:
    command = ex.command(t)
    assert command is not None and command.values is not None and not command.late
    return list(command.values)


def test_hold_commands_the_next_due_action_counted_from_the_frame_stamp() -> None:
    ex = make("hold")
    feed(ex, S0, [[0.0], [1.0], [2.0]])
    # due at S0+100, +200, +300 ms: each is commanded from the previous one's time up to its own
    expected = {20: 0.0, 100: 0.0, 120: 1.0, 200: 1.0, 220: 2.0, 300: 2.0}
    assert {ms: values_at(ex, S0 + ms * MS)[0] for ms in expected} == expected
    command = ex.command(S0 + 320 * MS)  # past the chunk: on_late hold repeats the last
    assert command is not None and command.late and command.values == (2.0,)


def test_a_new_chunk_takes_over_at_its_own_stamps_offset_not_at_its_arrival() -> None:
    ex = make("hold")
    feed(ex, S0, [[0.0]] * 10)
    values_at(ex, S0 + 300 * MS)
    # The frame stamped S0+200 ms is answered 150 ms later: at S0+360 ms its action 1 is due
    # (S0+200+2·100 = S0+400 is the first at or after), not its action 0.
    feed(ex, S0 + 200 * MS, [[10.0], [11.0], [12.0]], received=S0 + 350 * MS)
    assert values_at(ex, S0 + 360 * MS) == [11.0]
    command = ex.command(S0 + 420 * MS)
    assert command is not None and command.source_ns == S0 + 200 * MS
    assert ex.arrivals[-1].stamp_ns == S0 + 200 * MS
    assert ex.arrivals[-1].received_ns == S0 + 350 * MS


def test_interpolate_is_linear_between_the_actions() -> None:
    ex = make("interpolate")
    feed(ex, S0, [[0.0, 10.0], [10.0, 10.0], [30.0, 0.0]])
    assert values_at(ex, S0 + 60 * MS) == [0.0, 10.0]  # before the first action: the first
    assert values_at(ex, S0 + 150 * MS) == pytest.approx([5.0, 10.0])
    assert values_at(ex, S0 + 240 * MS) == pytest.approx([18.0, 6.0])
    assert values_at(ex, S0 + 300 * MS) == pytest.approx([30.0, 0.0])


def act_average(values_oldest_first: list[float], m: float) -> float:
    """ACT (Zhao et al. 2023), temporal ensembling: w_i = exp(-m·i), w_0 the oldest chunk."""
    weights = [math.exp(-m * i) for i in range(len(values_oldest_first))]
    return sum(w * v for w, v in zip(weights, values_oldest_first, strict=True)) / sum(weights)


@pytest.mark.parametrize("m", [0.01, 0.5, -0.3])
def test_ensemble_weights_chunks_one_action_period_apart_as_act_does(m: float) -> None:
    ex = make("ensemble", ensemble_coeff=m)
    chunks = [3.0, -1.0, 7.0]  # constant chunks from frames one action period apart
    for k, value in enumerate(chunks):
        feed(ex, S0 + k * ACTION, [[value]] * 10)
    t = S0 + 500 * MS  # covered by all three; the first command is not blended (nothing before)
    assert values_at(ex, t)[0] == pytest.approx(act_average(chunks, m))


def test_ensemble_averages_each_chunk_at_its_own_offset() -> None:
    ex = make("ensemble", ensemble_coeff=0.0)
    feed(ex, S0, [[float(i)] for i in range(10)])  # value i due at S0 + (i+1)·100 ms
    feed(ex, S0 + 50 * MS, [[100.0 + i] for i in range(10)])
    # at S0+400 ms: the first is at its action 3 (3.0), the second halfway from 102 to 103
    assert values_at(ex, S0 + 400 * MS)[0] == pytest.approx((3.0 + 102.5) / 2)


def step_sizes(mode: str, seed: int) -> tuple[float, float]:
    """Largest command step over a 6 s run of random chunks arriving late and irregularly, and
    the README's bound 2·span·control period/Δ (span: the spread of the actions' values)."""
    rng = np.random.default_rng(seed)
    ex = make(mode)
    pending: list[tuple[int, int, np.ndarray]] = []
    for k in range(12):
        stamp = S0 + k * 500 * MS + int(rng.integers(0, 100)) * MS
        arrival = stamp + int(rng.integers(30, 400)) * MS
        pending.append((arrival, stamp, rng.uniform(-1.0, 1.0, size=(10, 3))))
    steps, last = [], None
    for tick in range(1, 6 * 50):
        t = S0 + tick * CONTROL
        for _, stamp, rows in [p for p in pending if p[0] <= t]:
            feed(ex, stamp, rows.tolist())
        pending = [p for p in pending if p[0] > t]
        command = ex.command(t, current=[0.0, 0.0, 0.0])
        assert command is not None and command.values is not None
        now = np.asarray(command.values)
        if last is not None:
            steps.append(float(np.abs(now - last).max()))
        last = now
    return max(steps), 2 * 2.0 * CONTROL / ACTION


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["interpolate", "ensemble"])
def test_interpolate_and_ensemble_never_step_more_than_the_bound(mode: str, seed: int) -> None:
    largest, bound = step_sizes(mode, seed)
    assert largest <= bound + 1e-9


def test_hold_jumps_by_the_models_own_steps() -> None:
    largest, bound = step_sizes("hold", 0)
    assert largest > bound  # the expected discontinuities


def test_blending_starts_from_the_robots_position_before_the_first_command() -> None:
    ex = make("interpolate")
    feed(ex, S0, [[10.0]] * 5)
    first = ex.command(S0 + 120 * MS, current=[0.0])
    # one control period of a one-action-period blend from 0 towards 10
    assert first is not None and first.values == pytest.approx((10.0 * CONTROL / ACTION,))


def test_expire_drops_the_plan_and_refuses_its_late_actions() -> None:
    ex = make("interpolate")
    feed(ex, S0, [[5.0]] * 3)
    assert values_at(ex, S0 + 200 * MS) == [5.0]
    ex.expire()
    command = ex.command(S0 + 220 * MS)
    assert command is not None and command.late and command.values == (5.0,)  # hold
    assert not ex.add_action(S0, 3, [9.0], 0)  # the dropped chunk's stream goes on: refused
    assert not ex.add_action(S0 - 1, 0, [9.0], 0)  # an older frame: refused
    assert ex.counters.actions_refused == 2 and ex.counters.expiries == 1
    feed(ex, S0 + 150 * MS, [[7.0]] * 5)  # a newer frame resumes the loop
    resumed = ex.command(S0 + 240 * MS)
    assert resumed is not None and not resumed.late and resumed.source_ns == S0 + 150 * MS


@pytest.mark.parametrize(("policy", "expected"), [(OnLate.ZERO, (0.0, 0.0)), (OnLate.STOP, None)])
def test_on_late_zero_and_stop(policy: OnLate, expected: tuple[float, ...] | None) -> None:
    ex = make("hold", on_late=policy, width=2)
    command = ex.command(S0)
    assert command is not None and command.late and command.values == expected


def test_hold_before_any_command_holds_the_robot_or_sends_nothing() -> None:
    ex = make("ensemble")
    assert ex.command(S0) is None
    command = ex.command(S0 + CONTROL, current=[0.5, -0.5])
    assert command is not None and command.late and command.values == (0.5, -0.5)


def test_a_partial_chunk_falls_back_to_the_older_one_where_it_has_no_action_yet() -> None:
    ex = make("hold")
    feed(ex, S0, [[1.0]] * 10)
    feed(ex, S0 + 100 * MS, [[2.0]])  # streaming: only its action 0 (due S0+200 ms) so far
    assert values_at(ex, S0 + 200 * MS) == [2.0]
    assert values_at(ex, S0 + 220 * MS) == [1.0]
    assert ex.add_action(S0 + 100 * MS, 1, [3.0], 0)
    assert values_at(ex, S0 + 240 * MS) == [3.0]


def test_actions_must_match_the_joints() -> None:
    ex = make("hold", width=3)
    with pytest.raises(ValueError, match="expected 3"):
        ex.add_action(S0, 0, [1.0, 2.0], 0)
    with pytest.raises(ValueError, match="hold, interpolate or ensemble"):
        ExecutorConfig(ExecutorMode.NONE, ACTION, CONTROL)


def test_rtc_guidance_is_the_plans_tail_after_the_frame_and_the_measured_delay() -> None:
    ex = make("rtc")
    assert ex.rtc_guidance(S0, horizon=10) is None  # nothing to continue yet
    rows = [[float(i), -float(i)] for i in range(10)]
    # the chunk's first action reached the executor 250 ms after its frame: 3 periods
    feed(ex, S0, rows, received=S0 + 250 * MS)
    guidance = ex.rtc_guidance(S0 + 400 * MS, horizon=10)
    assert guidance is not None and guidance.inference_delay == 3
    # the new frame's action 0 is due at S0+500 ms, the old chunk's action 4
    np.testing.assert_array_equal(guidance.prev_chunk, np.array(rows[4:]))
    assert ex.rtc_guidance(S0 + 400 * MS, horizon=2).inference_delay == 2  # type: ignore[union-attr]
    short = ex.rtc_guidance(S0 + 800 * MS, horizon=10)  # 2 actions left: the delay fits them
    assert short is not None and len(short.prev_chunk) == 2 and short.inference_delay == 2
    assert ex.rtc_guidance(S0 + 1000 * MS, horizon=10) is None  # the plan has run out


@pytest.mark.parametrize(("mode", "blends"), [("rtc", False), ("interpolate", True)])
def test_rtc_switches_to_the_new_chunk_at_its_offset_without_blending(
    mode: str, blends: bool
) -> None:
    ex = make(mode)
    feed(ex, S0, [[0.0]] * 10)
    values_at(ex, S0 + 300 * MS)
    feed(ex, S0 + 200 * MS, [[10.0], [11.0], [12.0], [13.0]], received=S0 + 350 * MS)
    # at S0+360 ms the new chunk is 0.6 of the way from its action 0 (S0+300) to 1 (S0+400)
    value = values_at(ex, S0 + 360 * MS)[0]
    assert (value != pytest.approx(10.6)) if blends else value == pytest.approx(10.6)
    assert ex.counters.blends == int(blends)  # interpolate blends at the switch


def test_consecutive_chunks_disagreement_over_their_overlap() -> None:
    ex = make("ensemble")
    feed(ex, S0, [[float(i), 0.0] for i in range(5)])
    assert ex.counters.overlap_mean_abs is None  # one chunk: no overlap yet
    # two periods later: its actions 0..2 are for the first chunk's times 2..4
    feed(ex, S0 + 200 * MS, [[2.5, 1.0], [3.5, 1.0], [4.5, 1.0], [9.0, 9.0]])
    assert ex.counters.overlap_values == 6
    assert ex.counters.overlap_mean_abs == pytest.approx((3 * 0.5 + 3 * 1.0) / 6)


def test_a_switch_measures_the_gap_between_the_new_and_the_previous_plan() -> None:
    ex = make("hold")
    feed(ex, S0, [[0.0, 0.0]] * 10)
    values_at(ex, S0 + 250 * MS)
    assert ex.counters.switch_gap_mean is None
    feed(ex, S0 + 200 * MS, [[1.0, 3.0]] * 5)
    values_at(ex, S0 + 350 * MS)  # the new chunk takes over: its plan 2 away on average
    values_at(ex, S0 + 400 * MS)  # no new switch
    assert (ex.counters.switch_gaps, ex.counters.switch_gap_mean) == (1, pytest.approx(2.0))


def test_an_action_that_arrives_after_its_time_is_counted_and_never_commanded() -> None:
    ex = make("interpolate")
    # action 0 is for S0+100 ms and arrives at S0+50; action 1 (S0+200) arrives at S0+260
    assert ex.add_action(S0, 0, [1.0], S0 + 50 * MS)
    assert ex.add_action(S0, 1, [2.0], S0 + 260 * MS)
    assert ex.counters.actions_late == 1
