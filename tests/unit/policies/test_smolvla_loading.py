"""SmolVLA's folder reading: the tiny checkpoint loads strictly with bare and `model.`-prefixed
keys and mixed dtypes; a removed, foreign or misshapen tensor fails naming it; the config and
processor files read as LeRobot writes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tests.support.smolvla_cases import tiny_folder
from vla_server.policies.smolvla import CheckpointMismatchError, SmolVLA, read_config
from vla_server.policies.smolvla.processor_files import read_processor_files
from vla_server.policies.smolvla.tiny import TinySpec
from vla_server.policies.smolvla.weights import UNUSED, checkpoint_name

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPECS = {
    "prefixed": TinySpec(),
    "bare": TinySpec(prefixed=False),
    "mixed": TinySpec(mixed_dtypes=True),
}


def stored_names(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


@pytest.mark.parametrize("layout", SPECS)
def test_tiny_folder_loads_with_nothing_missing_or_unexpected(layout):
    folder = tiny_folder(SPECS[layout])
    model = SmolVLA.from_folder(folder)
    ours = {checkpoint_name(n) for n in model.state_dict()}
    stored = {k.removeprefix("model.") for k in stored_names(folder)}
    assert ours - stored == set()  # missing
    assert stored - ours == set(UNUSED)  # unexpected: only the two inference never reads
    prefixes = {k.startswith("model.") for k in stored_names(folder)}
    assert prefixes == {layout != "bare"}


def test_bare_and_prefixed_folders_hold_the_same_tensors():
    bare = load_file(tiny_folder(SPECS["bare"]) / "model.safetensors")
    prefixed = load_file(tiny_folder(SPECS["prefixed"]) / "model.safetensors")
    assert {"model." + k for k in bare} == set(prefixed)
    assert all(torch.equal(v, prefixed["model." + k]) for k, v in bare.items())


def test_mixed_folder_stores_lerobots_dtypes_and_loads_to_the_requested_one():
    tensors = load_file(tiny_folder(SPECS["mixed"]) / "model.safetensors")
    dtypes = {k: v.dtype for k, v in tensors.items()}
    assert dtypes["model.state_proj.weight"] == torch.float32
    assert (
        dtypes["model.vlm_with_expert.lm_expert.layers.0.self_attn.k_proj.weight"] == torch.bfloat16
    )
    assert (
        dtypes["model.vlm_with_expert.lm_expert.layers.1.self_attn.k_proj.weight"] == torch.float32
    )
    model = SmolVLA.from_folder(tiny_folder(SPECS["mixed"]), dtype=torch.bfloat16)
    assert model.prefix.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert model.head.action_out_proj.weight.dtype == torch.float32


def mutated(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "mutated"
    shutil.copytree(tiny_folder(), folder)
    tensors = load_file(folder / "model.safetensors")
    edit(tensors)
    save_file(tensors, folder / "model.safetensors")
    return folder


REMOVED = "model.vlm_with_expert.lm_expert.layers.3.self_attn.v_proj.weight"
FOREIGN = "model.vlm_with_expert.vlm.model.text_model.layers.4.mlp.up_proj.weight"


def test_a_removed_tensor_fails_naming_it(tmp_path):
    folder = mutated(tmp_path, lambda t: t.pop(REMOVED))
    with pytest.raises(CheckpointMismatchError, match="missing: " + REMOVED.removeprefix("model.")):
        SmolVLA.from_folder(folder)


def test_a_foreign_tensor_fails_naming_it(tmp_path):
    folder = mutated(tmp_path, lambda t: t.__setitem__(FOREIGN, torch.zeros(128, 64)))
    with pytest.raises(
        CheckpointMismatchError, match="unexpected: " + FOREIGN.removeprefix("model.")
    ):
        SmolVLA.from_folder(folder)


def test_a_misshapen_tensor_fails_naming_it(tmp_path):
    name = "model.action_out_proj.bias"
    folder = mutated(tmp_path, lambda t: t.__setitem__(name, torch.zeros(31)))
    with pytest.raises(CheckpointMismatchError, match=r"shape: action_out_proj.bias \[31\]"):
        SmolVLA.from_folder(folder)


def test_a_tensor_stored_bare_and_prefixed_fails(tmp_path):
    name = "model.state_proj.bias"
    folder = mutated(
        tmp_path, lambda t: t.__setitem__(name.removeprefix("model."), t[name].clone())
    )
    with pytest.raises(CheckpointMismatchError, match="state_proj.bias"):
        SmolVLA.from_folder(folder)


def test_config_reads_lerobots_fields_and_the_backbone():
    c = read_config(tiny_folder())
    assert c.vlm_folder == tiny_folder() / "vlm"
    assert (c.text.num_layers, c.expert.num_layers) == (4, 4)  # 6 in the backbone, cut to 4
    assert (c.expert.hidden_size, c.expert.intermediate_size) == (48, 256)
    assert c.expert_self_layers == (True, False, True, False)
    assert c.tokens_per_image == 16
    assert (c.chunk_size, c.num_steps, c.max_action_dim, c.action_dim) == (10, 10, 32, 6)
    assert read_config(tiny_folder(TinySpec(empty_cameras=1))).camera_keys[-1] == (
        "observation.images.empty_camera_0"
    )


def test_config_rejects_another_policy_type_and_a_missing_backbone(tmp_path):
    folder = tmp_path / "other"
    shutil.copytree(tiny_folder(), folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "type": "pi0"}))
    with pytest.raises(ValueError, match="not a smolvla policy"):
        read_config(folder)
    (folder / "config.json").write_text(json.dumps(cfg))
    shutil.rmtree(folder / "vlm")
    with pytest.raises(FileNotFoundError, match="no local SmolVLM2 folder"):
        read_config(folder)


def test_processor_files_read_as_lerobot_writes_them():
    files = read_processor_files(tiny_folder())
    assert files.newline and files.rename_map == {}
    assert (files.tokenizer.max_length, files.tokenizer.padding) == (16, "max_length")
    state = torch.randn(3, 6)
    normalized = files.normalizer("observation.state", state)
    stats = files.normalizer.stats["observation.state"]
    torch.testing.assert_close(normalized, (state - stats["mean"]) / (stats["std"] + 1e-8))
    actions = files.unnormalizer("action", state, inverse=True)
    stats = files.unnormalizer.stats["action"]
    torch.testing.assert_close(actions, state * stats["std"] + stats["mean"])
    assert torch.equal(files.normalizer("observation.images.camera1", state), state)
