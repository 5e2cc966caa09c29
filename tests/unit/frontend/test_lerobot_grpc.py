"""The LeRobot door's parts without a node: the protobuf wire, the chunk reassembly, the
restricted unpickler (LeRobot's classes in, everything else refused before it runs), the reply
pickles, the policy setup check, the bind rule."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from tests.support.hostile_pickles import EvalCall, PopenCall, SystemCall
from tests.support.lerobot_wire import chunks, lerobot_pickle
from vla_server.config import ServerArgs, is_loopback
from vla_server.errors import RequestError
from vla_server.frontend.lerobot_grpc import lerobot_types as lt
from vla_server.frontend.lerobot_grpc import wire
from vla_server.frontend.lerobot_grpc.policy_setup import ServedPolicy, check_setup
from vla_server.frontend.lerobot_grpc.reply import pickle_actions, timed_actions
from vla_server.frontend.lerobot_grpc.unpickler import RefusedPickle, restricted_loads
from vla_server.policies.base import RobotIO


def test_hostile_pickles_are_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "pwned"
    for payload, named in (
        (pickle.dumps(SystemCall(str(marker))), "system"),
        (pickle.dumps(EvalCall()), "builtins.eval"),
        (pickle.dumps(PopenCall()), "subprocess.Popen"),
        (pickle.dumps(np.array([object()], dtype=object)), "dtype"),
        (pickle.dumps({1, 2}, protocol=1), "set"),  # protocol 1 names builtins' set
    ):
        with pytest.raises(RefusedPickle, match=named.split(".")[-1]):
            restricted_loads(payload)
    assert not marker.exists()


def test_lerobot_payloads_load_onto_the_nodes_classes():
    obs = lt.TimedObservation(
        timestamp=12.5,
        timestep=3,
        must_go=True,
        observation={
            "j0.pos": np.float32(0.5),
            "j1.pos": 1.0,
            "cam": np.arange(24, dtype=np.uint8).reshape(2, 4, 3),
            "task": "pick",
            "t": torch.arange(3.0),
        },
    )
    loaded, module = restricted_loads(lerobot_pickle(obs))
    assert module == "lerobot.async_inference.helpers"
    assert isinstance(loaded, lt.TimedObservation) and loaded.timestep == 3 and loaded.must_go
    np.testing.assert_array_equal(loaded.observation["cam"], obs.observation["cam"])
    np.testing.assert_array_equal(loaded.observation["t"], np.arange(3.0, dtype=np.float32))
    feature = lt.PolicyFeature(type=lt.FeatureType.VISUAL, shape=(3, 2, 2))
    cfg, _ = restricted_loads(lerobot_pickle(_config({"x": feature})))
    assert cfg.lerobot_features["x"].type is lt.FeatureType.VISUAL


def test_the_pre_0_4_module_path_is_admitted_and_echoed_in_replies():
    obs = lt.TimedObservation(timestamp=1.0, timestep=0, observation={})
    _, module = restricted_loads(lerobot_pickle(obs, "lerobot.scripts.server.helpers"))
    assert module == "lerobot.scripts.server.helpers"
    reply = pickle_actions(timed_actions(np.zeros((2, 3)), 1.0, 0, 30.0), module)
    assert b"lerobot.scripts.server.helpers" in reply


def test_replies_carry_lerobots_timing_and_float32_tensors():
    chunk = np.arange(12, dtype=np.float64).reshape(4, 3)
    actions, module = restricted_loads(pickle_actions(timed_actions(chunk, 100.25, 7, 30.0), None))
    assert module == "lerobot.async_inference.helpers"
    assert [a.timestep for a in actions] == [7, 8, 9, 10]
    assert [a.timestamp for a in actions] == [100.25 + i * (1 / 30.0) for i in range(4)]
    assert all(a.action.dtype == np.float32 for a in actions)
    np.testing.assert_array_equal(np.stack([a.action for a in actions]), chunk)


def test_wire_round_trip_and_malformed_messages_name_the_field():
    msg = wire.encode_observation(wire.TransferState.TRANSFER_END, b"abc")
    assert wire.decode_observation(msg) == wire.Observation(3, b"abc")
    assert wire.decode_data(wire.encode_data(b"xyz"), "Actions") == b"xyz"
    assert wire.decode_data(b"", "Actions") == b""  # Empty
    with_unknown = msg + b"\x18\x05" + b"\x22\x01z"  # fields 3 (varint) and 4 (bytes): skipped
    assert wire.decode_observation(with_unknown) == wire.Observation(3, b"abc")
    for bad, field in (
        (b"\x12\x05ab", "Observation"),  # data longer than the message
        (b"\x08", "Observation"),  # a tag without its value
        (b"\x08\x80", "Observation"),  # a truncated varint
        (b"\x0a\x01x", "Observation.transfer_state"),  # bytes where the enum goes
        (b"\x0f", "Observation"),  # wire type 7
    ):
        with pytest.raises(RequestError) as e:
            wire.decode_observation(bad)
        assert e.value.field == field, bad


def test_reassembly_follows_lerobots_chunking():
    payload = bytes(range(256)) * 40
    assembler = wire.Reassembler(1 << 20)
    got = [assembler.feed(wire.decode_observation(m)) for m in chunks(payload, 1000)]
    assert got[:-1] == [None] * (len(got) - 1) and got[-1] == payload
    with pytest.raises(RequestError, match="before TRANSFER_BEGIN"):
        wire.Reassembler(100).feed(wire.Observation(2, b"x"))
    with pytest.raises(RequestError, match="unknown transfer state"):
        wire.Reassembler(100).feed(wire.Observation(0, b"x"))
    with pytest.raises(RequestError, match="exceeds"):
        wire.Reassembler(4).feed(wire.Observation(3, b"12345"))


ROBOT = RobotIO(cameras=("base_0_rgb", "wrist_0_rgb"), state_dim=4, chunk_size=4)
SERVED = ServedPolicy("pi0", ("/ckpt/tiny-pi0", "tiny-pi0"), ROBOT)


def _features(n_state: int = 4, cams: tuple[str, ...] = ("front", "wrist")) -> dict:
    image = {"dtype": "image", "shape": (24, 32, 3), "names": ["height", "width", "channels"]}
    names = [f"j{i}.pos" for i in range(n_state)]
    state = {"dtype": "float32", "shape": (n_state,), "names": names}
    return {"observation.state": state, **{f"observation.images.{c}": image for c in cams}}


def _config(features: dict, **kw) -> lt.RemotePolicyConfig:
    rename = {
        "observation.images.front": "observation.images.base_0_rgb",
        "observation.images.wrist": "observation.images.wrist_0_rgb",
    }
    values = {"policy_type": "pi0", "pretrained_name_or_path": "tiny-pi0"}
    values.update(actions_per_chunk=50, lerobot_features=features, rename_map=rename)
    return lt.RemotePolicyConfig(**{**values, **kw})


def test_policy_setup_maps_features_through_the_rename_map():
    setup = check_setup(_config(_features()), SERVED, accept_any=False)
    assert setup.state_names == ("j0.pos", "j1.pos", "j2.pos", "j3.pos")
    assert setup.cameras == {"front": "base_0_rgb", "wrist": "wrist_0_rgb"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"policy_type": "act"}, "policy_type"),
        ({"policy_type": "not-a-policy"}, "policy_type"),
        ({"pretrained_name_or_path": "lerobot/pi0_base"}, "pretrained_name_or_path"),
        ({"actions_per_chunk": 0}, "actions_per_chunk"),
        ({"lerobot_features": _features(n_state=6)}, "lerobot_features['observation.state']"),
        (
            {"lerobot_features": _features(cams=("top",))},
            "lerobot_features['observation.images.top']",
        ),
        ({"rename_map": {}}, "lerobot_features['observation.images.front']"),
    ],
)
def test_policy_setup_refusals_name_the_field(change, field):
    with pytest.raises(RequestError) as e:
        check_setup(_config(_features(), **change), SERVED, accept_any=False)
    assert e.value.field == field


def test_accept_any_policy_turns_the_identity_check_into_a_warning(caplog):
    cfg = _config(_features(), pretrained_name_or_path="someone/else", policy_type="act")
    check_setup(cfg, SERVED, accept_any=True)
    assert "someone/else" in caplog.text and "act" in caplog.text


def test_the_port_needs_a_key_or_the_insecure_flag_off_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("robot-pc.lan")
    args = {"model_path": "/x", "host": "0.0.0.0", "lerobot_grpc_port": 5005}
    with pytest.raises(ValueError, match="--lerobot-grpc-insecure"):
        ServerArgs(**args).configs()
    ServerArgs(**args, api_key="k").configs()
    ServerArgs(**args, lerobot_grpc_insecure=True).configs()
    ServerArgs(model_path="/x", host="0.0.0.0").configs()  # the door off: no rule
