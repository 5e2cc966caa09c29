"""LeRobot 0.6.1's `RobotClient`, replayed: the gRPC calls it made against the LeRobot door on
the tiny pi0 and pi0.5 for an SO-100-like arm (two cameras, a 6-dim state and action;
`tests/fixtures/lerobot_grpc/<name>.json`, recorded by `python -m vla_server.bench
lerobot-client --fixtures tests/fixtures/lerobot_grpc`, which runs the real client in LeRobot's
own venv; CI has no such venv, so this replay is what CI runs).

The calls are sent again, byte for byte, in the order they started. Each observation the live
run got a chunk for is followed by `GetActions` here, and must get the same chunk again
(timesteps, timestamps, and actions within 1e-5 or 2e-6 relative: the noise rule depends only
on the observation, and the node's float32 arithmetic may round differently since the
recording, as its kernels and thread counts change: 5.7e-7 relative on chunks of ~50) and
the one `/v1/actions` gives under the rule; observations the live run got no chunk for are
just sent.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.lerobot_wire import RawClient
from tests.support.server import free_port, idle_state, metric_sum, post_actions, run_server
from vla_server.bench.lerobot_check import (
    chunk_of,
    key,
    messages,
    observation_of,
    reference_body,
    timing_problems,
)
from vla_server.policies.registry import tiny_checkpoint

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lerobot_grpc"
REFERENCE_CHUNKS = 3  # also compared with /v1/actions (each is one more query)


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="module", params=["pi0-so100", "pi05-so100"])
def replay(request, tmp_path_factory):
    name = request.param
    fixture = load(name)
    port = free_port()
    flags = ("--lerobot-grpc-port", str(port), "--served-model-name", fixture["served_model_name"])
    flags += ("--lerobot-obs-queue-timeout", "0.5", "--lerobot-fps", str(fixture["fps"]))
    with run_server(tiny_checkpoint(fixture["tiny"]), tmp_path_factory.mktemp(name), *flags) as srv:
        yield fixture, srv, port


def live_chunks(calls: list[dict]) -> dict:
    """The live run's chunks by the observation they answer (those whose observation the
    fixture holds: a `GetActions` starts before the observation it answers is sent)."""
    sent = {key(observation_of(x)) for x in calls if x["method"] == "SendObservations"}
    out = {}
    for call in calls:
        if call["method"] == "GetActions" and call.get("code") == "OK":
            chunk = chunk_of(base64.b64decode(call["reply"]))
            if chunk is not None:
                out[(chunk.timesteps[0], chunk.timestamps[0])] = chunk
    return {k: v for k, v in out.items() if k in sent}


def test_the_recorded_client_gets_the_same_chunks_again(replay):
    fixture, srv, port = replay
    calls = fixture["calls"]
    live = live_chunks(calls)
    assert fixture["versions"]["lerobot"] == "0.6.1" and len(live) >= 10
    robot = fixture["robot"]
    assert (robot["state_dim"], robot["action_dim"], len(robot["cameras"])) == (6, 6, 2)
    state_names = [f"{j}.pos" for j in robot["joints"]]
    replayed = 0
    with RawClient(port) as c:
        c.ready()
        setup = next(x for x in calls if x["method"] == "SendPolicyInstructions")
        c.call("SendPolicyInstructions", messages(setup)[0])
        for call in calls:
            if call["method"] != "SendObservations":
                continue
            c.observe_messages(messages(call))
            obs = observation_of(call)
            expected = live.get(key(obs))
            if expected is None:
                continue
            got = chunk_of(c.get_actions())
            assert got is not None, f"no chunk for observation #{obs.timestep}"
            assert (got.timesteps, got.timestamps) == (expected.timesteps, expected.timestamps)
            np.testing.assert_allclose(got.actions, expected.actions, rtol=2e-6, atol=1e-5)
            assert not timing_problems(got, obs, fixture["fps"], len(expected.timesteps))
            if replayed < REFERENCE_CHUNKS:
                reference = post_actions(srv, reference_body(obs, state_names))["actions"]
                n = len(got.timesteps)
                np.testing.assert_allclose(got.actions, np.asarray(reference)[:n], atol=1e-5)
            replayed += 1
        assert c.get_actions() == b""  # every observation answered: Empty
    assert replayed == len(live)
    with srv.client() as h:
        assert idle_state(h) == {"pending": 0, "kv_used": 0}
        text = h.get("/metrics").text
    route = "grpc:/transport.AsyncInference/GetActions"
    assert metric_sum(text, "vla_http_requests_total", route=route, status="200") == replayed + 1
