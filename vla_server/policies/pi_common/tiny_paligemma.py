"""The tiny random PaliGemma the pi families' tiny checkpoints share, in LeRobot's layout: two
cameras, a 4-dim state, a 3-dim action, chunks of 4; Gemma width 64, 2 layers, 4 query heads
and 1 KV head of 16; SigLIP width 32, 2 layers, 28 px images in 14 px patches (4 tokens per
camera); its weights under LeRobot's names (`bare` as base repositories, `prefixed` under
`model.` as fine-tuned ones) and LeRobot's pre/post processor files with their statistics.

Weights are drawn with a fixed seed and a wide spread, so greedy choices have clear margins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vla_server.policies.demo_robots import SO100_CAMERAS, so100_stats
from vla_server.policies.pi_common.paligemma_dims import TINY, PaliGemmaDims

CAMERAS = ("base_0_rgb", "wrist_0_rgb")
STATE_DIM, ACTION_DIM, CHUNK = 4, 3, 4
FAST_VOCAB, SKIP, TEXT_BPE = 256, 8, 320
IMAGE_SIZE = TINY.image_size
PREFIXES = {
    "bare": "paligemma_with_expert.paligemma.",
    "prefixed": "model.paligemma_with_expert.paligemma.",
}
STATE_STATS = {
    "q01": [-1.0, 0.0, -0.5, 2.0],
    "q99": [1.0, 2.0, 0.5, 4.0],
    "mean": [0.0, 1.0, 0.0, 3.0],
    "std": [0.5, 0.5, 0.25, 0.5],
}
ACTION_STATS = {
    "q01": [-0.2, 0.0, -1.0],
    "q99": [0.2, 1.0, 1.0],
    "mean": [0.0, 0.5, 0.0],
    "std": [0.1, 0.25, 0.5],
}


@dataclass(frozen=True)
class TinyRobot:
    """The robot a tiny checkpoint is for: its cameras and the statistics of its state and
    action (their widths follow). The default is the tiny families' own."""

    cameras: tuple[str, ...] = CAMERAS
    state_stats: dict[str, list[float]] = field(default_factory=lambda: STATE_STATS)
    action_stats: dict[str, list[float]] = field(default_factory=lambda: ACTION_STATS)

    @property
    def state_dim(self) -> int:
        return len(self.state_stats["mean"])

    @property
    def action_dim(self) -> int:
        return len(self.action_stats["mean"])


TINY_ROBOT = TinyRobot()
# An SO-100-like arm (`demo_robots.py`): two cameras, 5 joints and the gripper as the state and
# as the action, mean-std at a sixth of each joint's range.
SO100_ROBOT = TinyRobot(SO100_CAMERAS, so100_stats(), so100_stats())
# The robots a tiny checkpoint can be built for, by the name its folder carries.
ROBOTS = {"tiny": TINY_ROBOT, "so100": SO100_ROBOT}


def vlm_config(vocab_size: int, dims: PaliGemmaDims = TINY) -> dict[str, Any]:
    """The PaliGemma of size `dims`, as a transformers config dict (the image token is one past
    the vocabulary, as in the real 257152-id model)."""
    from transformers import PaliGemmaConfig

    text = {
        "model_type": "gemma",
        "hidden_size": dims.text_width,
        "num_hidden_layers": dims.text_layers,
        "intermediate_size": dims.text_mlp,
        "num_attention_heads": dims.text_heads,
        "num_key_value_heads": dims.kv_heads,
        "head_dim": dims.head_dim,
        "vocab_size": vocab_size,
        "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": max(512, 2 * dims.tokens_per_camera + 512),
    }
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": dims.siglip_width,
        "intermediate_size": dims.siglip_mlp,
        "num_hidden_layers": dims.siglip_layers,
        "num_attention_heads": dims.siglip_heads,
        "image_size": dims.image_size,
        "patch_size": dims.patch_size,
        "vision_use_head": False,
    }
    config = PaliGemmaConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=vocab_size,
        projection_dim=dims.text_width,
        hidden_size=dims.text_width,
    )
    return config.to_dict()


def random_paligemma(
    vlm: dict[str, Any], seed: int, spread: float = TINY.spread, device: str = "cpu"
) -> Any:
    """transformers' PaliGemmaForConditionalGeneration with wide random weights (matrices at
    std `spread`), drawn on `device` (a GPU builds a real-size one in seconds)."""
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    torch.manual_seed(seed)
    with torch.device(device):
        model = PaliGemmaForConditionalGeneration(PaliGemmaConfig.from_dict(vlm)).eval()
    generator = torch.Generator(device).manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator, device=device)
            if param.dim() >= 2:
                param.copy_(spread * noise)
            elif "layernorm" in name or "layer_norm" in name:  # SigLIP LayerNorm: scale ~ 1
                param.copy_(1.0 + 0.1 * noise if name.endswith("weight") else 0.1 * noise)
            else:  # Gemma RMSNorm offsets, biases
                param.copy_(0.1 * noise)
    return model


def lerobot_tensors(model: Any, layout: str) -> dict[str, torch.Tensor]:
    """The model's weights under LeRobot's names; the tied embedding only as `lm_head`."""
    prefix = PREFIXES[layout]
    out = {}
    for name, tensor in model.state_dict().items():
        if name == "model.language_model.embed_tokens.weight":
            continue
        if name.startswith("model.vision_tower."):
            name = "model.vision_tower.vision_model." + name.removeprefix("model.vision_tower.")
        out[prefix + name] = tensor.detach().clone().contiguous()
    return out


def write_processors(out: Path, mode: str = "QUANTILES", robot: TinyRobot = TINY_ROBOT) -> None:
    """LeRobot's pre/post processor pipelines and their statistics files, normalising the state
    and the action by `mode` ("QUANTILES", "MEAN_STD") with `robot`'s statistics."""
    from safetensors.torch import save_file

    def stats(feature: str, values: dict[str, list[float]]) -> dict[str, torch.Tensor]:
        return {f"{feature}.{k}": torch.tensor(v, dtype=torch.float32) for k, v in values.items()}

    pre, post = (
        "policy_preprocessor_step_2_normalizer_processor.safetensors",
        ("policy_postprocessor_step_0_unnormalizer_processor.safetensors"),
    )
    norm_map = {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode}
    features = {
        "observation.state": {"type": "STATE", "shape": [robot.state_dim]},
        "action": {"type": "ACTION", "shape": [robot.action_dim]},
    }
    save_file({**stats("observation.state", robot.state_stats),
               **stats("action", robot.action_stats)}, str(out / pre))  # fmt: skip
    save_file(stats("action", robot.action_stats), str(out / post))
    config = {"eps": 1e-8, "features": features, "norm_map": norm_map}
    steps = [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        {"registry_name": "normalizer_processor", "config": config, "state_file": pre},
    ]
    write_json_file(
        out / "policy_preprocessor.json", {"name": "policy_preprocessor", "steps": steps}
    )
    post_config = {**config, "features": {"action": features["action"]}}
    steps = [{"registry_name": "unnormalizer_processor", "config": post_config, "state_file": post}]
    write_json_file(
        out / "policy_postprocessor.json", {"name": "policy_postprocessor", "steps": steps}
    )


def write_json_file(path: Path, value: Any) -> None:
    """Keys in the given order: a policy config's feature order is its camera order."""
    path.write_text(json.dumps(value, indent=2) + "\n")
