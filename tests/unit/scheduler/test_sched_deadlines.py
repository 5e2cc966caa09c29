"""Control deadlines and latest-frame-wins on the scheduling core. The fake forward takes
STEP_S and the clock advances by it every step, so the step timer's predictions are exact: a
request that cannot finish in time ends (finish reason `deadline`) as soon as that is known,
waiting or running, and frees its KV; newer frames of a session supersede its waiting ones."""

from __future__ import annotations

from tests.support.sched_fakes import STEP_S, Harness, reference
from vla_server.io_struct import ContinueGenerationReq, PauseGenerationReq

NEW = 40


def prompt(i: int) -> list[int]:
    return [20 + i % 40, 31, 47, 52 + i // 40, 60]


def warmed(**cfg) -> Harness:
    """A core whose step timer has measured prefill and decode steps."""
    h = Harness(**cfg)
    h.submit("warm-up", prompt(99), 4)
    h.run()
    return h


def test_deadline_overload_ends_hopeless_requests_before_they_run():
    """24 requests, one capture time, 4 slots: the first wave fits in 1.5x its run time, every
    later one would need 2x to 6x. Those end once it is clear they cannot make it, not when
    their deadline has passed, and without ever taking KV."""
    h = Harness(max_running_requests=4)
    deadline = h.clock.time() + 1.5 * NEW * STEP_S
    for i in range(24):
        h.submit(f"r{i}", prompt(i), NEW, deadline=deadline)
    h.run()
    h.assert_clean()
    outs = [h.out[f"r{i}"] for i in range(24)]
    assert [o.finish_type for o in outs] == ["length"] * 4 + ["deadline"] * 20
    assert all(o.ids == reference(prompt(i), NEW) for i, o in enumerate(outs[:4]))
    for o in outs[4:]:
        assert o.ids == [] and o.queue_steps is None, "it never ran"
        assert o.finish["message"].startswith("cannot finish before its deadline")
        assert o.finish["status_code"] == 504
    assert h.clock.time() < deadline, "the first wave ended within its deadline"


def test_deadline_a_request_that_can_make_it_is_not_ended():
    h = warmed()
    h.submit("r", prompt(3), NEW, deadline=h.clock.time() + 3 * NEW * STEP_S)
    h.run()
    assert h.out["r"].finish_type == "length" and h.out["r"].ids == reference(prompt(3), NEW)


def test_deadline_a_waiting_request_that_cannot_make_it_never_runs():
    h = warmed()
    h.submit("r", prompt(3), NEW, deadline=h.clock.time() + 0.5 * NEW * STEP_S)
    h.step()
    assert h.out["r"].finish_type == "deadline" and h.out["r"].ids == []
    assert h.out["r"].queue_steps is None
    h.assert_clean()


def test_deadline_a_running_request_that_falls_behind_ends_and_frees_its_kv():
    """Steps become 5x slower while it runs (a loaded GPU): the prediction ends it early."""
    h = warmed()
    h.submit("r", prompt(3), NEW, deadline=h.clock.time() + 2 * NEW * STEP_S, stream=True)
    h.step(10)
    assert h.running() == ["r"]
    h.runner.step_s = 5 * STEP_S
    h.run()
    h.assert_clean()
    res = h.out["r"]
    assert res.finish_type == "deadline" and "cannot finish before" in res.finish["message"]
    assert 10 <= len(res.ids) < NEW and res.ids == reference(prompt(3), len(res.ids))


def test_deadline_already_past_at_arrival_never_runs():
    h = Harness()
    h.submit("r", prompt(7), NEW, deadline=h.clock.time() - 59.9)
    h.step()
    res = h.out["r"]
    assert res.finish_type == "deadline" and res.finish["message"].startswith("missed")
    assert res.ids == [] and res.queue_steps is None
    h.assert_clean()


def test_deadline_counts_while_the_scheduler_is_paused():
    """A request that reached the scheduler runs against its deadline even while generation is
    paused: it ends there instead of running after the pause."""
    h = Harness()
    h.control(PauseGenerationReq, mode="in_place")
    h.submit("r", prompt(11), NEW, deadline=h.clock.time() + 0.2)
    h.step(19)
    assert h.waiting() == ["r"] and not h.out.ended("r")
    h.step(2)
    assert h.out["r"].finish_type == "deadline" and h.out["r"].ids == []
    h.control(ContinueGenerationReq)
    h.run()
    assert h.runner.batches == []


def test_deadline_earliest_first_within_a_priority():
    h = Harness(max_running_requests=1)
    h.submit("busy", prompt(0), 5)
    h.step()
    now = h.clock.time()
    h.submit("late", prompt(1), 3, deadline=now + 100, stream=True)
    h.submit("none", prompt(2), 3, stream=True)
    h.submit("soon", prompt(3), 3, deadline=now + 50, stream=True)
    h.run()
    order = [rid for rid, kind in h.out.events if kind == "first" and rid != "busy"]
    assert order == ["soon", "late", "none"]


def frame(h: Harness, rid: str, k: int, session: str = "cam") -> None:
    h.submit(rid, [40 + k, 41, 42], 8, session_id=session, supersede=True)


def test_deadline_newer_frames_supersede_older_waiting_ones():
    """While the node is busy each new frame of session `cam` ends the waiting older one at
    once; the newest runs; another session's frame is left alone."""
    h = Harness(max_running_requests=4)
    for i in range(4):
        h.submit(f"busy-{i}", prompt(100 + i), 30)
    h.step()
    frame(h, "other", 0, session="other-cam")
    frame(h, "f1", 1)
    for k in range(2, 6):
        frame(h, f"f{k}", k)
        assert h.out[f"f{k - 1}"].finish_type == "superseded"
        h.step()
    assert h.waiting() == ["other", "f5"]
    h.run()
    h.assert_clean()
    for k in range(1, 5):
        res = h.out[f"f{k}"]
        assert res.ids == [] and res.finish["message"] == "a newer request of the session arrived"
    assert h.out["f5"].ids == reference([45, 41, 42], 8)
    assert h.out["other"].finish_type == "length"


def test_deadline_a_newer_frame_supersedes_even_when_the_queue_is_full():
    h = Harness(max_running_requests=1, max_queued_requests=1)
    h.submit("busy", prompt(0), 30)
    h.step()
    frame(h, "old", 1)
    frame(h, "new", 2)
    assert h.out["old"].finish_type == "superseded" and not h.out.ended("new")
    h.run()
    assert h.out["new"].finish_type == "length"


def test_deadline_supersede_spares_a_running_frame():
    h = Harness()
    frame(h, "f1", 1)
    h.step()
    frame(h, "f2", 2)
    h.run()
    assert h.out["f1"].finish_type == h.out["f2"].finish_type == "length"
