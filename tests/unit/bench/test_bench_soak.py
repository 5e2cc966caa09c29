"""The soak benchmark's bookkeeping: how a request's end is classed, per-minute buckets, the
least-squares slope, the phase latency ratio."""

from __future__ import annotations

import math

import pytest

from vla_server.bench.soak_stats import (
    ABORTED,
    CLIENT_ERROR,
    CLIENT_LEFT,
    CUT_OFF,
    INCOMPLETE,
    OK,
    TRANSPORT_ERROR,
    Outcome,
    classify,
    is_lost,
    latency_ratio,
    per_minute_latency,
    per_minute_mean,
    results_by_kind,
    slope_per_minute,
)


@pytest.mark.parametrize(
    "status,finish,error,expected",
    [
        (200, "length", None, OK),
        (200, "stop", None, OK),
        (200, "abort", None, ABORTED),
        (200, "deadline", None, "finish_deadline"),
        (200, None, None, INCOMPLETE),  # the stream ended without its final chunk
        (400, None, None, CLIENT_ERROR),
        (499, None, None, CLIENT_ERROR),
        (503, None, None, "http_503"),
        (500, "length", None, "http_500"),
        (None, None, None, INCOMPLETE),
        (None, None, "ReadError", TRANSPORT_ERROR),
        (200, "length", "RemoteProtocolError", TRANSPORT_ERROR),
    ],
)
def test_classify(status, finish, error, expected):
    assert classify(status, finish, error) == expected


def test_lost_is_anything_but_a_result_a_4xx_or_a_client_that_left():
    for answered in (OK, ABORTED, CLIENT_ERROR, CLIENT_LEFT, CUT_OFF, "finish_deadline"):
        assert not is_lost(answered), answered
    for lost in (INCOMPLETE, TRANSPORT_ERROR, "http_500", "http_503"):
        assert is_lost(lost), lost


def _o(start: float, latency: float, result: str = OK, kind: str = "robot", phase: str = "soak"):
    return Outcome(kind, start, latency, result, phase)


def test_results_by_kind_counts_classes_and_lost():
    outcomes = [
        _o(0, 0.1),
        _o(1, 0.1, TRANSPORT_ERROR),
        _o(2, 0.1, CLIENT_ERROR, kind="bad_input"),
        _o(3, 0.1, "http_500", kind="bad_input"),
    ]
    assert results_by_kind(outcomes) == {
        "bad_input": {CLIENT_ERROR: 1, "http_500": 1, "lost": 1},
        "robot": {OK: 1, TRANSPORT_ERROR: 1, "lost": 1},
    }


def test_per_minute_latency_buckets_by_start_and_times_only_ok_requests():
    outcomes = [
        _o(0.0, 0.010),
        _o(59.9, 0.030),
        _o(30.0, 5.0, TRANSPORT_ERROR),  # counted, lost, not timed
        _o(60.0, 0.020),
        _o(61.0, 9.0, CLIENT_ERROR),
    ]
    rows = per_minute_latency(outcomes, 3)
    assert [(r["minute"], r["requests"], r["ok"], r["lost"]) for r in rows] == [
        (0, 3, 2, 1),
        (1, 2, 1, 0),
        (2, 0, 0, 0),
    ]
    assert rows[0]["p50_ms"] == pytest.approx(20.0)
    assert rows[1]["p99_ms"] == pytest.approx(20.0)
    assert math.isnan(rows[2]["p50_ms"])


def test_per_minute_mean():
    samples = [(0.0, 1.0), (30.0, 3.0), (65.0, 10.0)]
    means = per_minute_mean(samples, 3)
    assert means[:2] == [2.0, 10.0] and math.isnan(means[2])


def test_slope_is_least_squares_per_minute():
    line = [(t, 100.0 + 0.5 * t / 60.0) for t in range(0, 600, 5)]
    assert slope_per_minute(line) == pytest.approx(0.5)
    noisy = [(t, v + (1.0 if i % 2 else -1.0)) for i, (t, v) in enumerate(line)]
    assert slope_per_minute(noisy) == pytest.approx(0.5, abs=0.05)
    assert slope_per_minute([(0.0, 5.0), (60.0, 5.0)]) == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(slope_per_minute([(3.0, 1.0)]))
    assert math.isnan(slope_per_minute([(3.0, 1.0), (3.0, 2.0)]))


def test_latency_ratio_compares_ok_requests_of_two_phases():
    outcomes = [
        _o(0, 0.010, phase="unloaded"),
        _o(1, 0.010, phase="unloaded"),
        _o(2, 0.030, phase="slowloris"),
        _o(3, 9.0, TRANSPORT_ERROR, phase="slowloris"),
        _o(4, 1.0, phase="soak"),
    ]
    assert latency_ratio(outcomes, "slowloris", "unloaded") == pytest.approx(3.0)
