"""The node's robot defaults and the session's, applied in one place (`SessionRegistry.apply`)."""

from __future__ import annotations

import dataclasses

import pytest

from vla_server.config import ServerArgs
from vla_server.errors import RequestError
from vla_server.frontend.generate_request import GenerateItem
from vla_server.frontend.session_registry import (
    NodeRobotDefaults,
    OpenSessionBody,
    SessionRegistry,
)
from vla_server.io_struct import SessionParams
from vla_server.model.sampling import SamplingParams

NODE = NodeRobotDefaults(num_actions=4, unnorm_key="demo_arm", deadline_ms=150.0)


def item(**kw: object) -> GenerateItem:
    return GenerateItem(rid="r", sampling_params=SamplingParams(), text="go", **kw)  # type: ignore[arg-type]


def test_a_robot_request_that_names_none_gets_the_nodes():
    it = item(images=["frame"])
    it = SessionRegistry(NODE).apply(it, robot=True)
    assert (it.num_actions, it.unnorm_key, it.deadline_ms) == (4, "demo_arm", 150.0)


def test_named_fields_are_kept():
    it = item(images=["frame"], num_actions=1, unnorm_key="aloha_left", deadline_ms=50.0)
    it = SessionRegistry(NODE).apply(it, robot=True)
    assert (it.num_actions, it.unnorm_key, it.deadline_ms) == (1, "aloha_left", 50.0)


@pytest.mark.parametrize("robot,images", [(False, ["frame"]), (True, [])])
def test_chat_health_and_text_only_requests_stay_language_requests(robot, images):
    it = item(images=images)
    it = SessionRegistry(NODE).apply(it, robot=robot)
    assert (it.num_actions, it.unnorm_key, it.deadline_ms) == (None, None, None)


def test_the_sessions_defaults_come_before_the_nodes():
    reg = SessionRegistry(NODE)
    reg.add(OpenSessionBody(session_id="s", unnorm_key="aloha_left", deadline_ms=80.0))
    it = item(images=["frame"], session_id="s")
    it = reg.apply(it, robot=True)
    assert (it.num_actions, it.unnorm_key, it.deadline_ms) == (4, "aloha_left", 80.0)
    with pytest.raises(RequestError):
        reg.apply(item(images=["frame"], session_params=SessionParams(id="gone")), robot=True)


def test_flags_reach_the_front_end_and_bad_values_stop_the_node():
    args = ServerArgs(model_path="m", default_num_actions=3, default_unnorm_key="k")
    cfg = args.configs().frontend
    assert NodeRobotDefaults.from_config(cfg) == NodeRobotDefaults(3, "k", None, 0)
    for bad in ({"default_num_actions": 0}, {"default_deadline_ms": 0.0}):
        with pytest.raises(ValueError, match="--default-"):
            NodeRobotDefaults.from_config(dataclasses.replace(cfg, **bad))


def test_the_default_priority_applies_only_to_requests_without_one():
    """One default priority, resolved here (the scheduler takes the wire's as it is)."""
    reg = SessionRegistry(NodeRobotDefaults(priority=5))
    assert reg.apply(item(priority=0)).priority == 0
    assert reg.apply(item()).priority == 5
    assert reg.apply(item(images=["frame"]), robot=True).priority == 5


def test_the_item_is_not_changed_in_place():
    it = item(images=["frame"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        it.num_actions = 2  # type: ignore[misc]
    filled = SessionRegistry(NODE).apply(it, robot=True)
    assert it.num_actions is None and filled.num_actions == 4


@pytest.mark.parametrize("bad", [0.0, -20.0, float("nan"), float("inf")])
def test_a_control_period_must_be_a_finite_positive_number(bad: float) -> None:
    with pytest.raises(RequestError) as e:
        item(images=["frame"], deadline_ms=50.0, control_period_ms=bad)
    assert e.value.field == "control_period_ms"
