"""The tiny pi0 and pi0.5 for an SO-100-like arm (`pi0-so100`, `pi05-so100`, what LeRobot's
client is run against): the shared tiny model (the same weights) read as a policy with the arm's
two cameras, 6-dim state and action, and statistics over the arm's ranges; the shared tiny
folders keep their names."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from vla_server.policies.demo_robots import SO100_CAMERAS, SO100_DIM, SO100_JOINTS, so100_stats
from vla_server.policies.pi0.tiny import pi0_model_path
from vla_server.policies.registry import LEROBOT_CLIENT_TINIES, detect, tiny_checkpoint


@pytest.mark.parametrize("kind", ["pi0", "pi05"])
def test_the_so100_folder_is_the_tiny_model_for_the_arm(kind):
    folder = tiny_checkpoint(f"{kind}-so100")
    assert folder == pi0_model_path(kind, "bare", robot="so100")
    assert folder.name == f"tiny-{kind}-v1-bare-0-so100"
    assert pi0_model_path(kind, "bare").name == f"tiny-{kind}-v1-bare-0"
    spec = detect(folder).spec
    assert (spec.policy_type, spec.cameras) == (kind, SO100_CAMERAS)
    assert spec.state_dim == spec.action_dim == SO100_DIM == len(SO100_JOINTS) == 6
    stats = load_file(str(folder / "policy_preprocessor_step_2_normalizer_processor.safetensors"))
    for feature in ("observation.state", "action"):
        for name, values in so100_stats().items():
            assert stats[f"{feature}.{name}"].tolist() == pytest.approx(values, rel=1e-6)
    shared = load_file(str(pi0_model_path(kind, "bare") / "model.safetensors"))
    mine = load_file(str(folder / "model.safetensors"))
    assert shared.keys() == mine.keys() and all(shared[k].equal(mine[k]) for k in shared)


def test_the_arm_statistics_are_sensible():
    stats = so100_stats()
    for lo, hi, mean, std in zip(*(stats[k] for k in ("q01", "q99", "mean", "std")), strict=True):
        assert lo < mean < hi and 0 < std < hi - lo
    assert LEROBOT_CLIENT_TINIES == ("pi0-so100", "pi05-so100")


def test_an_unknown_robot_is_refused():
    with pytest.raises(ValueError, match="robot 'koch'"):
        pi0_model_path("pi0", "bare", robot="koch")
