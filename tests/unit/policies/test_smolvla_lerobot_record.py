"""The LeRobot 0.6.1 cross-check, replayed without LeRobot: `docs/results/
smolvla-lerobot-crosscheck.json` records LeRobot's own `SmolVLAPolicy` chunks for 12 cases on
tiny folders (`python -m vla_server.policies.smolvla.lerobot_crosscheck`). The folders are
rebuilt from their specs (the same bytes, checked by hash) and both our model and the test
reference must reproduce LeRobot's chunks."""

from __future__ import annotations

import hashlib
import json
from functools import cache

import pytest
import torch

from tests.support import smolvla_reference as ref
from tests.support.paths import REPO
from tests.support.smolvla_cases import tiny_folder
from vla_harness.lerobot_env import REQUIREMENT, VENV_NAME, ensure_lerobot_venv
from vla_server.policies.smolvla.lerobot_crosscheck import FOLDERS, Case, case_inputs, cases, ours
from vla_server.policies.smolvla.policy import SmolVLAPolicy
from vla_server.policies.smolvla.tiny import TinySpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")
RECORD = REPO / "docs/results/smolvla-lerobot-crosscheck.json"


@cache
def record() -> dict:
    return json.loads(RECORD.read_text())


def spec_of(index: int) -> TinySpec:
    spec = record()["folders"][index]["spec"]
    return TinySpec(**{**spec, "cameras": tuple(spec["cameras"])})


def test_the_record_covers_the_cases_and_lerobot_loaded_every_tensor():
    assert len(record()["cases"]) == len(cases()) >= 12
    assert [spec_of(i) for i in range(len(FOLDERS))] == list(FOLDERS)
    for folder in record()["folders"]:
        assert folder["lerobot"] == "0.6.1"
        assert folder["keys"] == {"missing": [], "unexpected": []}
    assert record()["max_abs_diff_actions"] < 1e-4


@pytest.mark.parametrize("index", range(len(FOLDERS)))
def test_rebuilt_folders_are_the_recorded_bytes(index):
    folder = tiny_folder(spec_of(index))
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert digest == record()["folders"][index]["model_sha256"]
    tokenizer = hashlib.sha256((folder / "vlm/tokenizer.json").read_bytes()).hexdigest()
    assert tokenizer == record()["folders"][index]["tokenizer_sha256"]


@pytest.mark.parametrize("index", range(12))
def test_ours_and_the_reference_reproduce_lerobots_chunk(index):
    row = record()["cases"][index]
    case = Case(row["folder"], tuple(row["cameras"]), row["task"], row["seed"])
    assert case == cases()[index]
    spec = spec_of(case.folder)
    lerobot = torch.tensor(row["lerobot_actions"])
    _, actions = ours(SmolVLAPolicy.from_folder(tiny_folder(spec)), case)
    torch.testing.assert_close(actions, lerobot, atol=1e-4, rtol=0)
    images, state, noise = case_inputs(case, 10, 32)
    batch = {k: v[None] for k, v in images.items()}
    _, theirs = ref.sample(
        ref.load_reference(tiny_folder(spec)), batch, state[None], [case.task], noise
    )
    torch.testing.assert_close(theirs[0], lerobot, atol=1e-4, rtol=0)


def test_a_complete_lerobot_venv_is_reused_without_installing(tmp_path):
    venv = tmp_path / VENV_NAME
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").write_text("")
    (venv / ".vla-server-complete").write_text(REQUIREMENT + "\n")
    lines: list[str] = []
    assert ensure_lerobot_venv(tmp_path, log=lines.append) == venv / "bin/python"
    assert lines == [f"lerobot venv: reusing {venv}"]
