"""LatencyMonitor: rolling percentiles against the statistics module, and the level rules."""

from __future__ import annotations

import random
import statistics

import pytest

from ros_bridge.latency_monitor import Budgets, LatencyMonitor, Level, RollingWindow


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def reference_percentile(samples: list[float], q: int) -> float:
    # statistics.quantiles(method="inclusive") interpolates linearly between order statistics
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


@pytest.mark.parametrize("n", [2, 7, 100, 1000, 2500])
def test_percentiles_match_statistics_over_the_last_window(n: int) -> None:
    rng = random.Random(n)
    samples = [rng.lognormvariate(3.0, 0.7) for _ in range(n)]
    window = RollingWindow(1000)
    for s in samples:
        window.add(s)
    kept = samples[-1000:]
    assert len(window) == len(kept) and window.total == n
    for q in (50, 99):
        assert window.percentile(q) == pytest.approx(reference_percentile(kept, q), rel=1e-12)
    assert window.max() == max(kept)


def test_empty_window_has_no_percentile() -> None:
    assert RollingWindow(5).percentile(99) is None
    with pytest.raises(ValueError):
        RollingWindow(0)


def levels(monitor: LatencyMonitor) -> dict[str, Level]:
    return {r.name: r.level for r in monitor.statuses()}


def make_monitor(**budgets: float) -> tuple[LatencyMonitor, FakeClock]:
    clock = FakeClock()
    return LatencyMonitor(Budgets(**budgets), window=50, clock=clock), clock


def test_no_frames_is_stale_then_ok() -> None:
    monitor, clock = make_monitor()
    assert levels(monitor)["camera input"] is Level.STALE
    monitor.frame_received()
    assert levels(monitor) == {
        "camera input": Level.OK,
        "inference server": Level.OK,
        "requests": Level.OK,
        "latency": Level.OK,
        "control loop": Level.OK,
    }
    clock.t += 3.0  # longer than stale_after_s without a frame
    assert levels(monitor)["camera input"] is Level.STALE


def test_bad_frame_warns_for_one_period() -> None:
    monitor, _ = make_monitor()
    monitor.frame_received()
    monitor.frame_dropped_bad("/cam: step*height != len(data)")
    (camera,) = [r for r in monitor.statuses() if r.name == "camera input"]
    assert camera.level is Level.WARN and "step*height" in camera.message
    assert dict(camera.values)["frames_dropped_bad"] == "1"
    monitor.frame_received()
    assert levels(monitor)["camera input"] is Level.OK


def test_p99_over_budget_warns_and_names_the_metric() -> None:
    monitor, _ = make_monitor(itl_p99_budget_ms=10.0)
    monitor.frame_received()
    for i in range(100):
        monitor.record("itl", 5.0 if i < 95 else 50.0)  # P99 lands in the slow tail
    (latency,) = [r for r in monitor.statuses() if r.name == "latency"]
    assert latency.level is Level.WARN and "ITL P99" in latency.message
    values = dict(latency.values)
    expected = reference_percentile([5.0] * 95 + [50.0] * 5, 99)
    assert float(values["itl_p99_ms"]) == pytest.approx(expected, abs=0.01)


def test_deadline_miss_is_error_until_a_period_without_misses() -> None:
    monitor, _ = make_monitor()
    monitor.frame_received()
    monitor.deadline_missed()
    assert levels(monitor)["latency"] is Level.ERROR
    monitor.frame_received()
    assert levels(monitor)["latency"] is Level.OK
    assert monitor.counters["deadline_misses"] == 1


def test_server_down_then_up() -> None:
    monitor, _ = make_monitor()
    monitor.frame_received()
    assert monitor.server_down("ConnectError") is True
    assert monitor.server_down("ConnectError") is False  # already down: no second transition
    (server,) = [r for r in monitor.statuses() if r.name == "inference server"]
    assert server.level is Level.ERROR and "ConnectError" in server.message
    assert monitor.server_up() is True and monitor.server_up() is False
    monitor.frame_received()
    assert levels(monitor)["inference server"] is Level.OK


def test_prefix_names_statuses_like_diagnostic_updater() -> None:
    monitor, _ = make_monitor()
    names = [r.name for r in monitor.statuses(prefix="vla_bridge: ")]
    assert names == [
        "vla_bridge: camera input",
        "vla_bridge: inference server",
        "vla_bridge: requests",
        "vla_bridge: latency",
        "vla_bridge: control loop",
    ]


def test_refused_requests_are_their_own_status_not_an_outage() -> None:
    monitor, _ = make_monitor()
    monitor.frame_received()
    assert monitor.request_rejected("HTTP 400: unnorm_key is required") is True
    assert monitor.request_rejected("HTTP 400: unnorm_key is required") is False
    statuses = {r.name: r for r in monitor.statuses()}
    assert statuses["inference server"].level is Level.OK
    requests = statuses["requests"]
    assert requests.level is Level.ERROR and "unnorm_key is required" in requests.message
    assert ("last_rejection", "HTTP 400: unnorm_key is required") in requests.values
    assert monitor.request_accepted() is True and monitor.request_accepted() is False
    assert levels(monitor)["requests"] is Level.OK


def test_request_errors_keep_their_first_distinct_reasons() -> None:
    monitor, _ = make_monitor()
    for reason in ["a", "b", "a", "c", "d", "e", "f", "g"]:
        monitor.request_error(reason)
    assert monitor.counters["request_errors"] == 8
    assert monitor.request_error_reasons == ["a", "b", "c", "d", "e"]
