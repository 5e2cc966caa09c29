"""A live node for tests, and what tests read off it (request state, KV, metrics)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from vla_harness.server_subprocess import ServerProcess, free_port, run_server

__all__ = [
    "ServerProcess",
    "free_port",
    "idle_state",
    "metric_by_label",
    "metric_value",
    "module_server",
    "run_server",
    "running_reqs",
    "wait_idle",
]


def module_server(model: Callable[[], str | Path] | None = None, *flags: str, **kwargs: Any) -> Any:
    """A module-scoped fixture: one live node for every test of the module that asks for it,
    on `model()` (None: the embedded demo VLA) started with `flags`."""

    @pytest.fixture(scope="module")
    def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
        path = model() if model is not None else None
        with run_server(path, tmp_path_factory.mktemp("server"), *flags, **kwargs) as s:
            yield s

    return server


def idle_state(client: Any) -> dict[str, int]:
    info = client.get("/get_server_info").json()
    return {"pending": info["num_pending_requests"], "kv_used": info["kv_pool"]["used"]}


def running_reqs(client: Any) -> int:
    """Requests the scheduler is running now (a sync httpx client of the node)."""
    return client.get("/get_server_info").json()["internal_states"][0]["num_running_reqs"]


def wait_idle(client: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    """/get_server_info once no request is pending in the front end or running in the scheduler
    (or the timeout passed: the caller asserts on what it returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.get("/get_server_info").json()
        busy = info["num_pending_requests"] or info["internal_states"][0]["num_running_reqs"]
        if not busy or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def samples(text: str, name: str) -> list[Sample]:
    """The samples named `name` in a /metrics page, read with prometheus_client's own parser."""
    return [
        s for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name
    ]


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels` (0 when none)."""
    return sum(
        s.value for s in samples(text, name) if all(s.labels.get(k) == v for k, v in labels.items())
    )


def metric_value(server: ServerProcess, name: str) -> float:
    """A metric's value, summed over its label sets (e.g. priority)."""
    text = server.client().get("/metrics").text
    assert samples(text, name), f"no metric {name}"
    return metric_sum(text, name)


def metric_by_label(server: ServerProcess, name: str, label: str) -> dict[str, float]:
    """A labelled metric's value per value of `label`."""
    text = server.client().get("/metrics").text
    return {s.labels[label]: s.value for s in samples(text, name) if label in s.labels}


def post_actions(server: ServerProcess, body: dict[str, Any]) -> dict[str, Any]:
    """`POST /v1/actions`, which must succeed."""
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def internal_state(server: ServerProcess) -> dict[str, Any]:
    """The scheduler's internal state (`/get_server_info`)."""
    with server.client() as c:
        return c.get("/get_server_info").json()["internal_states"][0]


def model_work(internal: dict[str, Any]) -> tuple[dict[str, int], dict[str, float]]:
    """The model runner's counters and its seconds per phase, from an internal state."""
    counters = dict(internal["model_counters"])
    return counters, counters.pop("seconds")


def assert_refused(server: ServerProcess, body: dict[str, Any], field: str) -> None:
    """`POST /v1/actions` with `body` is a 400 naming `field`, and leaves nothing running and
    no KV in use."""
    with server.client() as c:
        r = c.post("/v1/actions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field, r.text
    assert_nothing_left(server)


def assert_nothing_left(server: ServerProcess) -> None:
    """No request pending in the front end or running in the scheduler, and no KV in use."""
    with server.client() as c:
        info = c.get("/get_server_info").json()
    state = info["internal_states"][0]
    assert info["num_pending_requests"] == 0, info
    assert state["num_running_reqs"] == 0 and state["kv_pool"]["used"] == 0, state
