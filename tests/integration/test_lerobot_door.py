"""The LeRobot async inference door (`--lerobot-grpc-port`) on the tiny pi0, driven by a raw
gRPC client that pickles as LeRobot's does (`tests/support/lerobot_wire.py`): LeRobot's
semantics, each chunk against `/v1/actions` under the door's noise rule (recomputed here from
its documented text), hostile pickles, hostile messages, and the door's metrics label.
"""

from __future__ import annotations

import hashlib

import grpc
import numpy as np
import pytest

from tests.support.hostile_pickles import EvalCall, SystemCall
from tests.support.images import png_base64, random_rgb
from tests.support.lerobot_wire import RawClient, chunks, lerobot_pickle
from tests.support.server import (
    free_port,
    idle_state,
    metric_sum,
    module_server,
    post_actions,
)
from vla_server.frontend.lerobot_grpc import lerobot_types as lt
from vla_server.frontend.lerobot_grpc.unpickler import restricted_loads
from vla_server.frontend.lerobot_grpc.wire import decode_data, encode_observation
from vla_server.policies.pi0.tiny import pi0_model_path

PORT = free_port()
PROMPT = "pick up the red block"
ROUTE = "grpc:/transport.AsyncInference/"
server = module_server(
    lambda: pi0_model_path("pi0", "bare"),
    *("--lerobot-grpc-port", str(PORT), "--served-model-name", "tiny-pi0"),
    *("--lerobot-obs-queue-timeout", "0.5"),
)


def rule_seed(timestep: int, timestamp: float) -> int:
    text = f"{timestep}\0{timestamp!r}".encode()
    digest = hashlib.blake2b(text, digest_size=8, person=b"vla-lerobot-seed").digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF


def features() -> dict:
    image = {"dtype": "image", "shape": (24, 32, 3), "names": ["height", "width", "channels"]}
    state = {"dtype": "float32", "shape": (4,), "names": [f"j{i}.pos" for i in range(4)]}
    cams = {f"observation.images.{c}": image for c in ("front", "wrist")}
    return {"observation.state": state, **cams}


def policy(**change) -> bytes:
    cfg = {
        "policy_type": "pi0",
        "pretrained_name_or_path": "tiny-pi0",
        "lerobot_features": features(),
        "actions_per_chunk": 50,
        "rename_map": {
            "observation.images.front": "observation.images.base_0_rgb",
            "observation.images.wrist": "observation.images.wrist_0_rgb",
        },
    }
    return lerobot_pickle(lt.RemotePolicyConfig(**{**cfg, **change}))


def raw_obs(i: int) -> dict:
    state = {f"j{k}.pos": float(v) for k, v in enumerate([0.1 * i, 1.0, -0.5, 2.0 + i])}
    frames = {"front": random_rgb(24, 32, seed=2 * i), "wrist": random_rgb(24, 32, seed=2 * i + 1)}
    return {**state, **frames, "task": PROMPT}


def observation(i: int, timestep: int, must_go: bool = False, **change) -> lt.TimedObservation:
    return lt.TimedObservation(
        timestamp=1_800_000_000.0 + 0.1 * timestep + 1e-7 * i,
        timestep=timestep,
        observation={**raw_obs(i), **change},
        must_go=must_go,
    )


def expected(srv, i: int, obs: lt.TimedObservation) -> np.ndarray:
    raw = raw_obs(i)
    body = {
        "instruction": PROMPT,
        "image_data": {
            "base_0_rgb": png_base64(raw["front"]),
            "wrist_0_rgb": png_base64(raw["wrist"]),
        },
        "state": np.array([raw[f"j{k}.pos"] for k in range(4)], dtype=np.float32).tolist(),
        "seed": rule_seed(obs.timestep, obs.timestamp),
    }
    return np.asarray(post_actions(srv, body)["actions"], dtype=np.float32)


def chunk(reply: bytes) -> list:
    data = decode_data(reply, "Actions")
    return restricted_loads(data)[0] if data else []


def connected(**change) -> RawClient:
    client = RawClient(PORT)
    client.ready()
    client.policy(policy(**change))
    return client


def test_chunks_equal_v1_actions_under_the_noise_rule(server):
    with connected() as c:
        for i in range(2):
            obs = observation(i, timestep=10 * i, must_go=True)
            c.observe(lerobot_pickle(obs))
            actions = chunk(c.get_actions())
            assert [a.timestep for a in actions] == [obs.timestep + k for k in range(4)]
            assert [a.timestamp for a in actions] == [obs.timestamp + k / 30 for k in range(4)]
            got = np.stack([a.action for a in actions])
            np.testing.assert_allclose(got, expected(server, i, obs), atol=1e-5)
    with connected(actions_per_chunk=2) as c:  # the client's actions_per_chunk cuts the chunk
        c.observe(lerobot_pickle(observation(0, timestep=0, must_go=True)))
        assert len(chunk(c.get_actions())) == 2


def test_lerobots_queue_rules(server):
    with connected() as c:
        assert c.get_actions() == b""  # nothing sent: Empty after the queue timeout
        c.observe(lerobot_pickle(observation(0, timestep=5)))  # the first one runs
        c.observe(lerobot_pickle(observation(1, timestep=6)))  # newest wins: 5 is dropped
        assert chunk(c.get_actions())[0].timestep == 6
        c.observe(lerobot_pickle(observation(3, timestep=6)))  # timestep 6 was answered
        assert c.get_actions() == b""
        c.observe(lerobot_pickle(observation(1, timestep=7)))  # state as #6's: too similar
        assert c.get_actions() == b""
        c.observe(lerobot_pickle(observation(1, timestep=6, must_go=True)))  # must_go runs
        assert chunk(c.get_actions())[0].timestep == 6
        c.observe(lerobot_pickle(observation(4, timestep=8)))  # a new state runs
        assert chunk(c.get_actions())[0].timestep == 8


def hostile_pickles(marker: str) -> dict[str, bytes]:
    import pickle
    from collections import Counter

    return {
        "posix.system": pickle.dumps(SystemCall(marker)),
        "builtins.eval": pickle.dumps(EvalCall()),
        "collections.Counter": pickle.dumps(Counter("ab")),
    }


def _refused(call, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args)
    return e.value


def test_hostile_pickles_are_refused_logged_and_never_run(server, tmp_path):
    marker = tmp_path / "pwned"
    with connected() as c:
        for name, payload in hostile_pickles(str(marker)).items():
            for call in (c.observe, c.policy):
                e = _refused(call, payload)
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert e.details().startswith("data: refused") and name in e.details()
        # A pickle of the allowed classes that hides one inside is refused too.
        inner = observation(0, timestep=1, must_go=True, task=EvalCall())
        assert "builtins.eval" in _refused(c.observe, lerobot_pickle(inner)).details()
        assert c.get_actions() == b""  # nothing was queued
    assert not marker.exists()
    log = server.log_path.read_text()
    assert log.count("lerobot door: refused a pickle") >= 7 and "posix.system" in log
    with connected() as c:  # the next honest client is served
        c.observe(lerobot_pickle(observation(0, timestep=0, must_go=True)))
        assert len(chunk(c.get_actions())) == 4


def test_instructions_naming_another_checkpoint_load_nothing(server):
    with server.client() as h:
        before = h.get("/get_model_info").json()["model_path"]
    with RawClient(PORT) as c:
        c.ready()
        for change, field in (
            ({"pretrained_name_or_path": "lerobot/pi0_base"}, "pretrained_name_or_path"),
            ({"pretrained_name_or_path": "/tmp/other-checkpoint"}, "pretrained_name_or_path"),
            ({"policy_type": "smolvla"}, "policy_type"),
        ):
            e = _refused(c.policy, policy(**change))
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert e.details().startswith(f"{field}:"), e.details()
    with server.client() as h:
        assert h.get("/get_model_info").json()["model_path"] == before


HOSTILE_OBSERVATIONS = {
    "observation['j3.pos']": {"j3.pos": "high"},
    "observation['front']": {"front": np.zeros((4, 4), dtype=np.float64) + np.nan},
    "observation['top']": {"top": random_rgb(8, 8, seed=3)},
    "observation['task']": {"task": ""},
}


def refused_observations(srv) -> float:
    with srv.client() as h:
        text = h.get("/metrics").text
    return metric_sum(
        text, "vla_http_requests_total", route=ROUTE + "SendObservations", status="400"
    )


def test_hostile_inputs_name_the_field_and_leave_nothing_pending(server):
    before = refused_observations(server)
    payload = lerobot_pickle(observation(0, 0, True))
    with connected() as c:
        for field, change in HOSTILE_OBSERVATIONS.items():
            e = _refused(c.observe, lerobot_pickle(observation(0, 0, True, **change)))
            assert e.details().startswith(f"{field}:"), e.details()
        missing = observation(0, 0, True)
        del missing.observation["j3.pos"]  # a state of the wrong length
        assert (
            _refused(c.observe, lerobot_pickle(missing))
            .details()
            .startswith("observation['j3.pos']: is missing")
        )
        assert "6 values" in _refused(c.policy, policy(lerobot_features={
            **features(),
            "observation.state": {"dtype": "float32", "shape": (6,),
                                  "names": [f"j{i}.pos" for i in range(6)]},
        })).details()  # fmt: skip
        for messages, field in (
            ([b"\x0f"], "Observation:"),  # not a protobuf message
            (chunks(payload, 1000)[:2], "Observation:"),  # BEGIN, MIDDLE, and the stream ends
            ([encode_observation(2, b"abc")], "Observation.transfer_state:"),  # MIDDLE first
            ([encode_observation(3, payload[:-9])], "data:"),  # a truncated pickle
        ):
            assert _refused(c.observe_messages, messages).details().startswith(field)
        assert _refused(c.policy, b"\x80not a pickle").details().startswith("data:")
        assert c.get_actions() == b""  # nothing pending
    with server.client() as h:
        assert idle_state(h) == {"pending": 0, "kv_used": 0}
    # The door's own label: this test's refused observations, 4 + 1 + 4.
    assert refused_observations(server) - before == len(HOSTILE_OBSERVATIONS) + 5
