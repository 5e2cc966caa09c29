"""pi0 / pi0.5 folders: every layout (LeRobot bare and `model.`-prefixed, openpi's conversion)
loads with no missing or unexpected tensor and computes the same; a stray, missing or
misshapen tensor and a type that disagrees with the weights fail naming it; the policy config
(type defaults, openpi's config read as LeRobot's, the expert's dimensions); openpi's norm
stats; the time embedding's float64 precision; the Euler helpers."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support.families import family_tokenizer
from vla_server.model.denoise import denoise_times, euler_update
from vla_server.model.model_runner import ModelRunner
from vla_server.model.weight_loader import WeightLoadError
from vla_server.policies.pi0.family import Pi0Family
from vla_server.policies.pi0.flow_head import time_embedding, time_frequencies
from vla_server.policies.pi0.flow_model import FlowModel, expert_model_config
from vla_server.policies.pi0.tiny import CHUNK, LAYOUTS, dit_config, pi0_model_path
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.openpi_norm_stats import read_norm_stats
from vla_server.policies.pi_common.pad_resize import PadResize
from vla_server.policies.pi_common.paligemma_config import expert_config
from vla_server.policies.pi_common.paligemma_vision import PaliGemmaVisionEncoder
from vla_server.policies.pi_common.tiny_paligemma import (
    ACTION_DIM,
    ACTION_STATS,
    CAMERAS,
    STATE_DIM,
    STATE_STATS,
)
from vla_server.policies.registry import detect

pytestmark = pytest.mark.usefixtures("one_torch_thread")
EXPERT = "paligemma_with_expert.gemma_expert."


def _runner(folder: str | Path) -> ModelRunner:
    return ModelRunner(detect(folder), device="cpu", max_total_tokens=64, progress=False)


def _same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pairs = zip(a.state_dict().items(), b.state_dict().items(), strict=True)
    return all(na == nb and torch.equal(ta, tb) for (na, ta), (nb, tb) in pairs)


@pytest.mark.parametrize("kind", ["pi0", "pi05"])
def test_every_layout_loads_the_same_model(kind):
    runners = {layout: _runner(pi0_model_path(kind, layout)) for layout in LAYOUTS}
    bare = runners["bare"]
    for layout, runner in runners.items():
        config = detect(pi0_model_path(kind, layout)).decoder_config()
        assert (config.architecture, config.prefix_lm) == (kind, True)
        assert isinstance(runner.vision, PaliGemmaVisionEncoder)
        assert isinstance(runner.head, FlowModel) and runner.head.kind == kind
        assert runner.parts.spec == bare.parts.spec, layout
        for part in ("model", "vision", "head"):
            assert _same_parameters(getattr(runner, part), getattr(bare, part)), (layout, part)
        folder = pi0_model_path(kind, layout)
        assert family_tokenizer(folder)("pick up the cup\n")["input_ids"][0] == 2  # <bos>
        assert detect(folder).image_preprocessor("pil") == PadResize(28, 28)
    spec = bare.parts.spec
    assert spec.cameras == CAMERAS and (spec.state_dim, spec.action_dim) == (STATE_DIM, ACTION_DIM)
    assert spec.chunk_size == CHUNK and spec.max_action_dim == spec.max_state_dim == 32
    mode = "MEAN_STD" if kind == "pi0" else "QUANTILES"
    assert spec.normalization_mapping == {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode}
    assert spec.policy_type in Pi0Family.config_types and spec.num_inference_steps == 10
    # The unused expert lm_head is there to be ignored.
    assert EXPERT + "lm_head.weight" in load_file(
        pi0_model_path(kind, "openpi") / "model.safetensors"
    )


def test_every_checkpoint_tensor_lands_in_a_parameter():
    """The flow half's plan covers the file exactly: its tensors, bar the unused lm_head, are
    the flow model's parameters, element for element."""
    folder = pi0_model_path("pi05", "openpi")
    runner = _runner(folder)
    tensors = load_file(str(folder / "model.safetensors"))
    backbone = "paligemma_with_expert.paligemma."
    flow_tensors = {n: t for n, t in tensors.items() if not n.startswith(backbone)}
    flow_tensors.pop(EXPERT + "lm_head.weight")
    params = sum(p.numel() for p in runner.head.parameters())
    assert params == sum(t.numel() for t in flow_tensors.values())
    head = runner.head.head
    torch.testing.assert_close(head.time_mlp_in.weight, flow_tensors["time_mlp_in.weight"])
    dense = runner.head.expert.layers[1].post_attention_layernorm.dense
    name = EXPERT + "model.layers.1.post_attention_layernorm.dense.bias"
    torch.testing.assert_close(dense.bias, flow_tensors[name])
    q = runner.head.expert.layers[0].self_attn.qkv_proj.weight[: 4 * 16]
    torch.testing.assert_close(q, flow_tensors[EXPERT + "model.layers.0.self_attn.q_proj.weight"])


def _edited(folder: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "ckpt"
    shutil.copytree(folder, copy)
    tensors = load_file(str(copy / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(copy / "model.safetensors"))
    return copy


@pytest.mark.parametrize(
    ("layout", "change", "named"),
    [
        ("bare", "stray_expert", f"unexpected tensor.*{EXPERT}model.layers.0.mlp.extra.weight"),
        ("prefixed", "stray_root", "unexpected tensor.*model.time_embedding_bias"),
        ("openpi", "missing", f"missing tensor.*{EXPERT}model.layers.1.mlp.down_proj.weight"),
        ("bare", "misshapen", "action_out_proj.weight: checkpoint \\[32, 8\\]"),
        ("bare", "missing_vlm", "missing tensor.*model.layers.1.self_attn.o_proj.weight"),
    ],
)
def test_a_stray_missing_or_misshapen_tensor_fails_naming_it(tmp_path, layout, change, named):
    prefix = "model." if layout == "prefixed" else ""

    def edit(tensors: dict[str, torch.Tensor]) -> None:
        if change == "stray_expert":
            tensors[f"{prefix}{EXPERT}model.layers.0.mlp.extra.weight"] = torch.zeros(2, 2)
        elif change == "stray_root":
            tensors["model.time_embedding_bias"] = torch.zeros(2)
        elif change == "missing":
            del tensors[f"{prefix}{EXPERT}model.layers.1.mlp.down_proj.weight"]
        elif change == "misshapen":
            tensors[f"{prefix}action_out_proj.weight"] = torch.zeros(32, 8)
        else:
            del tensors[f"{prefix}paligemma_with_expert.paligemma.model.language_model."
                        "layers.1.self_attn.o_proj.weight"]  # fmt: skip

    with pytest.raises(WeightLoadError, match=named):
        _runner(_edited(pi0_model_path("pi0", layout), tmp_path, edit))


@pytest.mark.parametrize(("kind", "claimed"), [("pi0", "pi05"), ("pi05", "pi0")])
def test_a_type_that_disagrees_with_the_weights_fails(tmp_path, kind, claimed):
    copy = tmp_path / "ckpt"
    shutil.copytree(pi0_model_path(kind, "bare"), copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "type": claimed}))
    names = {"pi0": "pi0", "pi05": "pi0.5"}
    message = f"type '{claimed}' \\({names[claimed]}\\), but the weights are {names[kind]}'s"
    with pytest.raises(WeightLoadError, match=message):
        _runner(copy)


def test_weights_mixing_both_kinds_fail(tmp_path):
    def add_pi0_head(tensors: dict[str, torch.Tensor]) -> None:
        tensors["state_proj.weight"] = torch.zeros(32, 32)

    copy = _edited(pi0_model_path("pi05", "bare"), tmp_path, add_pi0_head)
    with pytest.raises(WeightLoadError, match="mix pi0 tensors \\(state_proj.weight\\)"):
        _runner(copy)


def test_an_openpi_folder_without_flow_tensors_is_refused(tmp_path):
    def drop_flow(tensors: dict[str, torch.Tensor]) -> None:
        for name in [n for n in tensors if not n.startswith("paligemma_with_expert.paligemma.")]:
            del tensors[name]

    copy = _edited(pi0_model_path("pi0", "openpi"), tmp_path, drop_flow)
    with pytest.raises(ValueError, match="no pi0/pi0.5 tensors"):
        detect(copy).decoder_config()


def test_type_defaults_and_the_named_expert_variants():
    features = {
        "input_features": {"observation.images.top": {"type": "VISUAL", "shape": [3, 224, 224]}},
        "output_features": {"action": {"type": "ACTION", "shape": [7]}},
    }
    pi0 = LeRobotPolicySpec.from_config({"type": "pi0", **features})
    pi05 = LeRobotPolicySpec.from_config({"type": "pi05", **features})
    fast = LeRobotPolicySpec.from_config({"type": "pi0_fast", **features})
    assert (pi0.tokenizer_max_length, pi05.tokenizer_max_length) == (48, 200)
    assert pi0.normalization_mapping["STATE"] == pi0.normalization_mapping["ACTION"] == "MEAN_STD"
    assert pi05.normalization_mapping["ACTION"] == "QUANTILES"
    flow_types = set(Pi0Family.config_types)
    assert {pi0.policy_type, pi05.policy_type} <= flow_types and fast.policy_type not in flow_types
    assert (pi0.num_inference_steps, pi0.min_period, pi0.max_period) == (10, 4e-3, 4.0)
    assert pi0.action_expert_variant == "gemma_300m" and pi0.dit_config is None
    real = expert_config(pi0)  # lerobot/pi0_base's expert
    assert (real.hidden_size, real.num_hidden_layers, real.intermediate_size) == (1024, 18, 4096)
    assert (real.num_attention_heads, real.num_key_value_heads, real.head_dim) == (8, 1, 256)
    dummy = LeRobotPolicySpec.from_config({"type": "pi0", "action_expert_variant": "dummy",
                                           **features})  # fmt: skip
    tiny = expert_config(dummy)
    assert (tiny.hidden_size, tiny.num_hidden_layers, tiny.intermediate_size) == (64, 4, 128)
    assert (tiny.num_attention_heads, tiny.num_key_value_heads, tiny.head_dim) == (8, 1, 16)
    with pytest.raises(ValueError, match="num_inference_steps"):
        LeRobotPolicySpec.from_config({"type": "pi0", "num_inference_steps": 0, **features})


def test_the_expert_config_comes_from_dit_config_and_must_pair_with_the_backbone():
    folder = pi0_model_path("pi0", "bare")
    family = detect(folder)
    backbone, spec = family.decoder_config(), family.spec
    expert = expert_model_config(backbone, spec)
    assert (expert.hidden_size, expert.intermediate_size) == (32, 64)
    assert (expert.num_layers, expert.num_heads, expert.head_dim) == (2, 4, 16)
    assert expert.hidden_act == "gelu_pytorch_tanh" and expert.norm_unit_offset
    deeper = LeRobotPolicySpec.from_config(
        {**family.config, "dit_config": {**dit_config(), "num_hidden_layers": 3}}
    )
    with pytest.raises(ValueError, match="num_layers \\(3\\) must equal the backbone's \\(2\\)"):
        expert_model_config(backbone, deeper)


def test_openpi_norm_stats_and_asset_choice(tmp_path):
    folder = pi0_model_path("pi0", "openpi")
    stats = read_norm_stats(folder)
    assert set(stats) == {"state", "actions"}
    for feature, values in (("state", STATE_STATS), ("actions", ACTION_STATS)):
        for name, expected in values.items():
            assert stats[feature][name].dtype == np.float32
            np.testing.assert_array_equal(stats[feature][name], np.float32(expected))
    copy = tmp_path / "ckpt"
    shutil.copytree(folder, copy)
    shutil.copytree(copy / "assets" / "tiny", copy / "assets" / "other")
    with pytest.raises(ValueError, match="several assets \\(other, tiny\\)"):
        read_norm_stats(copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "asset_id": "other"}))
    assert set(read_norm_stats(copy)) == {"state", "actions"}
    (copy / "config.json").write_text(json.dumps({**config, "asset_id": "droid"}))
    with pytest.raises(FileNotFoundError, match="asset_id 'droid'"):
        read_norm_stats(copy)


def test_the_time_embedding_is_computed_in_float64():
    """At t = 1 the sinusoid's arguments reach 2 pi / 4e-3 ~ 1571 rad; openpi's float64 values,
    from an independent numpy computation, within float32 rounding."""
    width, times = 32, np.array([1.0, 0.9, 0.5, 0.1], dtype=np.float32)
    periods = 4e-3 * (4.0 / 4e-3) ** np.linspace(0.0, 1.0, width // 2)
    angles = times.astype(np.float64)[:, None] * (2 * math.pi / periods)[None, :]
    expected = np.concatenate((np.sin(angles), np.cos(angles)), axis=1).astype(np.float32)
    ours = time_embedding(torch.from_numpy(times), time_frequencies(width, 4e-3, 4.0, "cpu"))
    assert ours.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), expected, atol=1e-7, rtol=0)


def test_flow_times_and_euler_steps():
    assert denoise_times(10) == [1.0 + k * (-1.0 / 10) for k in range(10)]
    np.testing.assert_allclose(denoise_times(10), np.linspace(1.0, 0.1, 10), atol=1e-12)
    assert denoise_times(1) == [1.0]
    with pytest.raises(ValueError, match="num_steps"):
        denoise_times(0)
    noise = torch.randn((1, CHUNK, 32), generator=torch.Generator("cpu").manual_seed(0))
    x, c = noise, torch.full_like(noise, 0.75)
    for _t in denoise_times(10):
        x = euler_update(x, c, 10)
    torch.testing.assert_close(x, noise - c, atol=1e-6, rtol=0)  # a constant field: noise - c


def test_update_weights_swaps_the_flow_half_or_nothing(tmp_path):
    runner = _runner(pi0_model_path("pi0", "bare"))
    before = {n: t.clone() for n, t in runner.head.state_dict().items()}
    with pytest.raises(WeightLoadError, match="different architecture"):
        runner.update_weights(detect(pi0_model_path("pi05", "bare")))
    copy = tmp_path / "ckpt"
    shutil.copytree(pi0_model_path("pi0", "bare"), copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "chunk_size": CHUNK + 1}))
    with pytest.raises(WeightLoadError, match="different architecture: chunk_size: 4 != 5"):
        runner.update_weights(detect(copy))
    assert all(torch.equal(t, before[n]) for n, t in runner.head.state_dict().items())
    other = pi0_model_path("pi0", "openpi", seed=1)
    runner.update_weights(detect(other))
    assert _same_parameters(runner.head, _runner(other).head)
    assert not torch.equal(runner.head.head.state_proj.weight, before["head.state_proj.weight"])
