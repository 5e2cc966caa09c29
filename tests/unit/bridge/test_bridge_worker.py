"""BridgeWorker against a scripted server: actions, supersession, deadlines, faults, fields."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import pytest

from ros_bridge.bridge_worker import BridgeWorker, FrameJob, WorkerConfig
from ros_bridge.camera_frame import raw_frame
from ros_bridge.chunk_executor import RtcGuidance
from ros_bridge.frame_input import prepare_image
from ros_bridge.late_policy import LateCommand, OnLate
from ros_bridge.latency_monitor import LatencyMonitor, Level
from ros_bridge.request_body import RequestSettings
from ros_bridge.stream_client import Backoff
from tests.support.bridge_fakes import DIGEST_HEX, FakeServer, RecordingSink


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def job(stamp_sec: int, value: int = 0) -> FrameJob:
    pixels = np.full((4, 4, 3), value, np.uint8)
    return FrameJob((stamp_sec, 0), (prepare_image(raw_frame("/c", 1, pixels, "rgb8"), None),))


IMAGE = job(0).images[0]


@pytest.fixture
def make_worker() -> Iterator[Callable[..., tuple[BridgeWorker, RecordingSink]]]:
    workers: list[BridgeWorker] = []

    def make(
        server: FakeServer, backoff: Backoff | None = None, **config: object
    ) -> tuple[BridgeWorker, RecordingSink]:
        sink = RecordingSink()
        request = RequestSettings(num_actions=2, session=str(config.pop("session", "")))
        worker = BridgeWorker(
            "http://vla",
            WorkerConfig(request=request, **config),
            LatencyMonitor(),
            sink,
            backoff=backoff or Backoff(initial_s=0.01, max_s=0.05),
            transport=server.transport(),
        )
        worker.start()
        workers.append(worker)
        return worker, sink

    yield make
    for worker in workers:
        worker.stop()


def test_actions_are_published_in_order_with_the_frame_stamp(make_worker) -> None:
    server = FakeServer(action_dim=3)
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.submit(job(11, value=9))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    assert sink.actions == [((11, 0), 0, (0.0,) * 3), ((11, 0), 1, (1.0,) * 3)]
    (body,) = server.accepted
    expected = prepare_image(
        raw_frame("/c", 1, np.full((4, 4, 3), 9, np.uint8), "rgb8"), bytes.fromhex(DIGEST_HEX)
    )
    assert body["mm_hashes"] == [expected.mm_hash] and body["num_actions"] == 2
    counts = worker.monitor.percentiles()
    assert counts["ttft"]["n"] == 1 and counts["itl"]["n"] == 5
    assert counts["frame_to_action"]["n"] == counts["time_to_first_action"]["n"] == 1
    assert counts["frame_to_action"]["p50_ms"] >= counts["time_to_first_action"]["p50_ms"]
    assert sink.late == [] and worker.monitor.counters["deadline_misses"] == 0


def test_an_action_is_published_before_the_stream_ends(make_worker) -> None:
    server = FakeServer(action_dim=3, token_delay_s=0.02)
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    (final_sent,) = server.final_chunk_at
    # Same clock, same thread: the first action went out while the server had tokens to send,
    # and the second (carried by the final chunk) after it, so the clocks line up.
    assert sink.published_at[0] < final_sent <= sink.published_at[1]
    assert [index for _, index, _ in sink.actions] == [0, 1]


def test_newer_frame_supersedes_the_waiting_one(make_worker) -> None:
    server = FakeServer(token_delay_s=0.05)
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.submit(job(1))
    wait_for(lambda: len(server.accepted) == 1)
    worker.submit(job(2))
    worker.submit(job(3))
    assert worker.wait_idle(30)
    assert sorted({stamp for stamp, _, _ in sink.actions}) == [(1, 0), (3, 0)]
    assert worker.monitor.counters["frames_superseded"] == 1
    assert worker.monitor.counters["frames_processed"] == 2


def test_wait_idle_covers_a_frame_the_loop_has_not_taken_yet(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0)
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker._loop.call_soon_threadsafe(time.sleep, 0.3)  # the loop is busy when the frame comes
    worker.submit(job(5))
    assert worker.wait_idle(10)
    assert worker.monitor.counters["frames_processed"] == 1
    assert [stamp for stamp, _, _ in sink.actions] == [(5, 0), (5, 0)]


def test_a_frame_the_server_ended_at_its_deadline_is_expired_not_processed(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, finish={"type": "deadline", "status_code": 504})
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.submit(job(4))
    assert worker.wait_idle(10)
    counters = worker.monitor.counters
    assert (counters["frames_expired"], counters["frames_processed"]) == (1, 0)
    assert counters["frames_failed"] == 0 and worker.monitor.server_is_up
    server.finish = None
    worker.submit(job(5))
    assert worker.wait_idle(10)
    assert (counters["frames_expired"], counters["frames_processed"]) == (1, 1)


def test_missed_deadline_applies_hold_in_place_of_the_late_actions(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0)
    worker, sink = make_worker(server, deadline_ms=150.0, on_late=OnLate.HOLD)
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    server.first_token_delay_s = 0.6
    worker.submit(job(2))
    wait_for(lambda: worker.monitor.counters["frames_expired"] == 1)
    # the last action held, stamped with the late frame's stamp (the frame it stands in for),
    # and the frame's own actions, past their due time, never published
    assert sink.late == [LateCommand(OnLate.HOLD, sink.actions[1][2], (2, 0))]
    assert [stamp for stamp, _, _ in sink.actions] == [(1, 0), (1, 0)]
    counters = worker.monitor.counters
    assert (counters["actions_late"], counters["frames_processed"]) == (2, 1)
    assert worker.monitor.counters["deadline_misses"] == 1
    assert {r.name: r.level for r in worker.monitor.statuses()}["latency"] is Level.ERROR


def test_with_an_executor_a_late_frame_still_hands_its_actions_over(make_worker) -> None:
    # the executor commands each action only at its own due time, so the later ones of a frame
    # whose first action was late can still be applied
    server = FakeServer(token_delay_s=0.0, first_token_delay_s=0.6)
    worker, sink = make_worker(
        server, deadline_ms=150.0, on_late=OnLate.HOLD, executor_times_actions=True
    )
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_expired"] == 1)
    assert [stamp for stamp, _, _ in sink.actions] == [(1, 0), (1, 0)]
    assert worker.monitor.counters["actions_late"] == 0


def test_stop_policy_cancels_the_late_request(make_worker) -> None:
    server = FakeServer(first_token_delay_s=1.0)
    worker, sink = make_worker(server, deadline_ms=100.0, on_late=OnLate.STOP)
    worker.submit(job(1))
    wait_for(lambda: sink.late == [LateCommand(OnLate.STOP, None, (1, 0))])
    assert worker.wait_idle(10)
    assert sink.actions == []
    assert worker.monitor.counters["frames_processed"] == 0


def test_server_down_applies_on_late_once_then_recovers(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0)
    worker, sink = make_worker(server, deadline_ms=30_000.0, on_late=OnLate.ZERO, action_width=3)
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    server.up = False
    worker.submit(job(2))
    wait_for(lambda: not worker.monitor.server_is_up)
    time.sleep(0.2)  # several backoff rounds while down
    assert sink.late == [LateCommand(OnLate.ZERO, (0.0, 0.0, 0.0), (2, 0), failed=True)]
    levels = {r.name: r.level for r in worker.monitor.statuses()}
    assert levels["inference server"] is Level.ERROR
    server.up = True
    worker.submit(job(3))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 2)
    assert worker.monitor.server_is_up and worker.monitor.counters["reconnects"] == 1
    assert sink.actions[-1][0] == (3, 0)
    assert any("back" in message for _, message in sink.reports)


def test_5xx_while_health_answers_is_one_outage_backed_off_until_a_request_works(
    make_worker,
) -> None:
    server = FakeServer(token_delay_s=0.0, generate_error=503)
    backoff = Backoff(initial_s=0.01, max_s=0.05)
    worker, sink = make_worker(
        server, backoff, deadline_ms=30_000.0, on_late=OnLate.ZERO, action_width=3
    )
    for n in range(1, 5):
        worker.submit(job(n))
        # One growing delay per failed request: the backoff is not reset between frames.
        wait_for(lambda n=n: len(server.bodies) == n and backoff.attempts == n)
    # once for the outage, stamped with the first frame that got no action
    assert sink.late == [LateCommand(OnLate.ZERO, (0.0, 0.0, 0.0), (1, 0), failed=True)]
    assert worker.monitor.counters["reconnects"] == 0
    assert worker.monitor.counters["frames_failed"] == 4
    assert [level for level, _ in sink.reports] == ["error"]  # no "back" between frames
    status = {r.name: r for r in worker.monitor.statuses()}["inference server"]
    assert status.level is Level.ERROR and "HTTP 503" in status.message
    server.generate_error = None
    worker.submit(job(5))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    assert worker.monitor.counters["reconnects"] == 1 and backoff.attempts == 0
    assert {r.name: r.level for r in worker.monitor.statuses()}["inference server"] is Level.OK
    assert len(sink.late) == 1 and sink.actions[-1][0] == (5, 0)
    assert sink.reports[-1] == ("info", "server http://vla is back")


def test_optional_fields_unknown_to_the_server_are_dropped_once(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0)
    worker, _ = make_worker(server, deadline_ms=30_000.0, session="episode-1")
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    worker.submit(job(2))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 2)
    # deadline_ms, session_id, supersede: one 400 each, then never sent again
    assert len(server.bodies) - len(server.accepted) == 3
    assert server.sessions == ["episode-1"]  # the episode's session was opened once
    assert len(server.accepted) == 2
    assert worker.monitor.counters["request_errors"] == 0


def test_a_server_without_sessions_still_gets_the_frames(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, has_sessions=False)
    worker, sink = make_worker(server, deadline_ms=30_000.0, session="episode-1")
    for n in (1, 2):
        worker.submit(job(n))
        wait_for(lambda n=n: worker.monitor.counters["frames_processed"] == n)
    assert [path for path, _ in server.posts].count("/open_session") == 1  # not per frame
    assert [level for level, _ in sink.reports] == ["warn"]
    assert all("session_id" not in body for body in server.accepted)
    assert worker.monitor.counters["request_errors"] == 0 and worker.monitor.server_is_up


def test_rejected_request_is_an_error_until_one_succeeds(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, finish={"type": "action_error", "message": "bad key"})
    worker, sink = make_worker(server, deadline_ms=30_000.0, on_late=OnLate.STOP)
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["request_errors"] == 1)
    # The request was wrong, not the server: no outage, the reason where an operator looks.
    assert worker.monitor.server_is_up and worker.monitor.requests_rejected
    assert sink.late == [LateCommand(OnLate.STOP, None, (1, 0), failed=True)]
    assert sink.reports == [
        ("error", "the server refuses the request: HTTP 0: bad key; applying on_late")
    ]
    statuses = {r.name: r for r in worker.monitor.statuses()}
    assert statuses["inference server"].level is Level.OK
    assert statuses["requests"].level is Level.ERROR and "bad key" in statuses["requests"].message
    server.finish = None
    worker.submit(job(2))
    wait_for(lambda: not worker.monitor.requests_rejected)
    assert sink.reports[-1] == ("info", "the server accepts the requests again")


def test_a_4xx_is_reported_as_a_wrong_request_without_backoff(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, generate_error=400)
    backoff = Backoff(initial_s=0.01, max_s=0.05)
    worker, sink = make_worker(server, backoff, deadline_ms=30_000.0, on_late=OnLate.STOP)
    for n in range(1, 4):
        worker.submit(job(n))
        wait_for(lambda n=n: worker.monitor.counters["request_errors"] == n)
    assert backoff.attempts == 0 and worker.monitor.server_is_up
    # once, when refusals start
    assert sink.late == [LateCommand(OnLate.STOP, None, (1, 0), failed=True)]
    assert [level for level, _ in sink.reports] == ["error"] * 3
    (reason,) = worker.monitor.request_error_reasons  # the same reason, kept once
    assert reason.startswith("HTTP 400")


def test_malformed_sse_lines_reach_the_monitor(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, extra_lines=["data: {broken", "what is this"])
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_processed"] == 1)
    assert worker.monitor.counters["malformed_sse_lines"] == 2 and len(sink.actions) == 2


def test_text_only_server_gets_the_instruction_only(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, multimodal=False)
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.submit(job(1))
    assert worker.wait_idle(10)
    wait_for(lambda: len(server.bodies) >= 1)
    assert "image_data" not in server.bodies[0] and sink.actions == []
    assert any(level == "warn" and "no image/action support" in m for level, m in sink.reports)


def test_frame_that_waited_past_its_deadline_is_never_sent(make_worker) -> None:
    server = FakeServer(first_token_delay_s=0.6)
    worker, sink = make_worker(server, deadline_ms=200.0, on_late=OnLate.HOLD)
    worker.submit(job(1))
    wait_for(lambda: len(server.accepted) == 1)
    worker.submit(job(2))  # waits behind frame 1, past its own deadline
    wait_for(lambda: worker.monitor.counters["frames_stale"] == 1)
    assert worker.wait_idle(10)
    assert len(server.accepted) == 1
    assert worker.monitor.counters["deadline_misses"] == 2
    # frame 1's actions came after its deadline: its on_late command went out instead
    assert sink.actions == [] and worker.monitor.counters["actions_late"] == 2


def test_stop_ends_the_loop_while_the_server_is_still_being_probed(make_worker) -> None:
    server = FakeServer(up=False)  # never reachable: the loop is probing and backing off
    worker, _ = make_worker(server, backoff=Backoff(initial_s=0.01, max_s=0.01))
    wait_for(lambda: not worker.monitor.server_is_up)
    worker.stop(timeout_s=60)
    assert worker._main is not None and worker._main.done() and worker._main.exception() is None


def test_partial_chunks_shorten_num_actions_once_with_a_warning(make_worker) -> None:
    # the server ends each frame at its deadline after 2 of the 4 actions asked for
    server = FakeServer(token_delay_s=0.0, max_actions=2, finish={"type": "deadline"})
    server.known_fields |= {"deadline_ms", "control_period_ms"}
    worker, sink = make_worker(server, deadline_ms=30_000.0)
    worker.set_config(replace(worker.config, request=replace(worker.config.request, num_actions=4)))
    for sec in (1, 2, 3):
        worker.submit(job(sec))
        assert worker.wait_idle(10)
    assert [body["num_actions"] for body in server.accepted] == [4, 2, 2]
    warnings = [m for level, m in sink.reports if "cannot arrive in time" in m]
    assert len(warnings) == 1 and "num_actions 4 -> 2" in warnings[0]
    loop = {r.name: r for r in worker.monitor.statuses()}["control loop"]
    assert loop.level is Level.WARN and "4 -> 2" in loop.message


def test_with_an_executor_chunks_with_no_action_lengthen_the_period(make_worker) -> None:
    # the server ends every frame at its deadline before any action
    server = FakeServer(token_delay_s=0.0, max_actions=0, finish={"type": "deadline"})
    server.known_fields |= {"deadline_ms", "control_period_ms"}
    worker, sink = make_worker(server, deadline_ms=30_000.0, executor_times_actions=True)
    request = replace(worker.config.request, control_period_ms=20.0)
    worker.set_config(replace(worker.config, request=request))
    for sec in (1, 2):
        worker.submit(job(sec))
        assert worker.wait_idle(10)
    assert [body["control_period_ms"] for body in server.accepted] == [20.0, 40.0]
    assert sink.periods == [pytest.approx(0.04), pytest.approx(0.08)]
    assert worker.action_period_s == pytest.approx(0.08)
    warnings = [m for level, m in sink.reports if "cannot arrive in time" in m]
    assert len(warnings) == 2 and "from 20 to 40 ms" in warnings[0]


def test_rtc_sends_the_executors_tail_and_delay_and_the_robot_state(make_worker) -> None:
    server = FakeServer(token_delay_s=0.0, state_dim=2)
    server.known_fields |= {"deadline_ms", "control_period_ms", "state"}
    server.known_fields |= {"prev_chunk", "inference_delay", "execution_horizon"}
    worker, sink = make_worker(server, deadline_ms=30_000.0, rtc_horizon=8)
    worker.submit(FrameJob((1, 0), (IMAGE,), state=(0.5, -0.5)))
    assert worker.wait_idle(10)
    assert "prev_chunk" not in server.accepted[0]  # no plan yet to continue
    sink.guidance = RtcGuidance(np.array([[1.0, 2.0, 3.0]] * 4), inference_delay=3)
    worker.submit(FrameJob((2, 0), (IMAGE,), state=(0.25, 0.0)))
    assert worker.wait_idle(10)
    body = server.accepted[1]
    assert body["prev_chunk"] == [[1.0, 2.0, 3.0]] * 4
    assert (body["inference_delay"], body["execution_horizon"]) == (3, 8)
    assert [b["state"] for b in server.accepted] == [[0.5, -0.5], [0.25, 0.0]]
    assert sink.guidance_asked == [((1, 0), 8), ((2, 0), 8)]


def test_a_frame_whose_chunk_is_already_due_is_not_sent(make_worker) -> None:
    # one action 1 µs apart: by the time the loop takes the frame, its chunk is all past due
    server = FakeServer(token_delay_s=0.0)
    server.known_fields |= {"deadline_ms", "control_period_ms"}
    worker, sink = make_worker(server, deadline_ms=30_000.0, executor_times_actions=True)
    request = replace(worker.config.request, num_actions=1, control_period_ms=0.001)
    worker.set_config(replace(worker.config, request=request))
    worker.submit(job(1))
    wait_for(lambda: worker.monitor.counters["frames_expired"] == 1)
    assert worker.wait_idle(10)
    assert server.bodies == [] and sink.actions == []
    assert sink.periods == [pytest.approx(2e-6)]  # learnt as a chunk without an action
