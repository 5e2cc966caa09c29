"""FrameGate: one in flight, the newest waiting, stale ones dropped; checked against a model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ros_bridge.frame_gate import FrameGate, Ticket


def ticket(seq: int, arrived: float, deadline: float = 1.0) -> Ticket[str]:
    return Ticket(seq, arrived, arrived + deadline, f"frame{seq}")


def test_newer_frame_supersedes_the_waiting_one_not_the_one_in_flight() -> None:
    gate: FrameGate[str] = FrameGate()
    first, second, third = ticket(1, 0.0), ticket(2, 0.1), ticket(3, 0.2)
    assert gate.offer(first) is None
    assert gate.take(0.0) is first
    assert gate.offer(second) is None
    assert gate.take(0.15) is None  # first is still in flight
    assert gate.offer(third) is second and second.superseded
    gate.done(first)
    assert gate.take(0.3) is third
    assert gate.take(0.3) is None


def test_frame_past_its_deadline_is_dropped_as_stale() -> None:
    gate: FrameGate[str] = FrameGate()
    late = ticket(1, 0.0, deadline=0.5)
    gate.offer(late)
    assert gate.take(0.5) is None
    assert gate.drain_stale() == [late] and gate.drain_stale() == []
    assert gate.in_flight is None and gate.waiting is None


@given(st.lists(st.tuples(st.sampled_from(["offer", "take", "done"]), st.floats(0, 0.2))))
def test_against_a_reference_model(ops: list[tuple[str, float]]) -> None:
    """Model: a waiting slot and an in-flight slot; deadline 0.3 s after arrival."""
    gate: FrameGate[str] = FrameGate()
    now, seq = 0.0, 0
    waiting: tuple[int, float] | None = None  # (seq, arrived)
    flight: int | None = None
    sent: list[int] = []
    superseded: list[int] = []
    stale: list[int] = []
    for op, dt in ops:
        now += dt
        if op == "offer":
            seq += 1
            replaced = gate.offer(ticket(seq, now, deadline=0.3))
            assert (replaced.seq if replaced else None) == (waiting[0] if waiting else None)
            if waiting:
                superseded.append(waiting[0])
            waiting = (seq, now)
        elif op == "take":
            got = gate.take(now)
            expected = None
            if flight is None and waiting is not None:
                if now >= waiting[1] + 0.3:
                    stale.append(waiting[0])
                else:
                    expected = flight = waiting[0]
                    sent.append(expected)
                waiting = None
            assert (got.seq if got else None) == expected
        elif flight is not None:
            gate.done(gate.in_flight)  # type: ignore[arg-type]
            flight = None
    assert [t.seq for t in gate.drain_stale()] == stale
    # Every frame is sent, superseded, stale or still waiting, exactly once.
    accounted = sent + superseded + stale + ([waiting[0]] if waiting else [])
    assert sorted(accounted) == list(range(1, seq + 1))
