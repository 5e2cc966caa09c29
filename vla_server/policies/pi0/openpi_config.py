"""An openpi PyTorch conversion folder, described as the LeRobot policy config it amounts to.

openpi's `examples/convert_jax_model_to_pytorch.py` (pi0 and pi0.5 only) writes
`model.safetensors`, a `config.json` that is not a transformers config, `{action_dim,
action_horizon, paligemma_variant, action_expert_variant, precision}`, and
`assets/<asset_id>/norm_stats.json`. It has no `"type"`: pi0 vs pi0.5 comes from the weight
names (`flow_keys.flow_kind`). The LeRobot config built from it has:

* cameras: openpi's `base_0_rgb`, `left_wrist_0_rgb`, `right_wrist_0_rgb`, at 224 px;
* state and action dimensions: the lengths of the norm stats' `state` and `actions` means;
  `chunk_size` = `action_horizon`; `max_state_dim` = `max_action_dim` = `action_dim` (openpi pads
  both to it); `dtype` = `precision`;
* normalisation MEAN_STD for pi0 and QUANTILES for pi0.5, as openpi trains them
  (`use_quantile_norm = model_type != PI0`); the statistics are openpi's
  (`multimodal/openpi_norm_stats.py`), not LeRobot processor files.

Keys openpi's files do not have, which a folder may add to describe itself (the project's tiny
checkpoints do): `cameras` (a list of names), `image_resolution`, `vlm_config`, `dit_config`,
`num_inference_steps`, `tokenizer_max_length`, `asset_id` (which `assets/` folder to read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vla_server.model.weight_loader import tensor_files
from vla_server.policies.pi0.flow_keys import flow_kind
from vla_server.policies.pi_common.lerobot_features import ACTION_KEY, IMAGE_PREFIX, STATE_KEY
from vla_server.policies.pi_common.openpi_norm_stats import read_norm_stats

OPENPI_KEYS = ("action_dim", "action_horizon", "paligemma_variant", "action_expert_variant")
DEFAULT_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
_NORMALIZATION = {"pi0": "MEAN_STD", "pi05": "QUANTILES"}
_PASSED_ON = ("vlm_config", "dit_config", "num_inference_steps", "tokenizer_max_length")


def is_openpi_config(raw: dict[str, Any]) -> bool:
    return "type" not in raw and all(key in raw for key in OPENPI_KEYS)


def openpi_policy_config(folder: Path, raw: dict[str, Any]) -> dict[str, Any] | None:
    """The LeRobot-shaped config of an openpi conversion folder whose `config.json` is `raw`;
    None when `raw` is not openpi's."""
    if not is_openpi_config(raw):
        return None
    kind = flow_kind(tensor_files(folder))
    if kind is None:
        raise ValueError(
            f"{folder}: an openpi config.json, but no pi0/pi0.5 tensors in the weights"
        )
    stats = read_norm_stats(folder)
    if "actions" not in stats or "mean" not in stats["actions"]:
        raise ValueError(f"{folder}: the norm stats have no 'actions' mean")
    resolution = [int(v) for v in raw.get("image_resolution", [224, 224])]
    visual = {"type": "VISUAL", "shape": [3, *resolution]}
    features: dict[str, Any] = {
        IMAGE_PREFIX + c: visual for c in raw.get("cameras", DEFAULT_CAMERAS)
    }
    if "mean" in stats.get("state", {}):
        features[STATE_KEY] = {"type": "STATE", "shape": [len(stats["state"]["mean"])]}
    mode = _NORMALIZATION[kind]
    config = {
        "type": kind,
        "input_features": features,
        "output_features": {
            ACTION_KEY: {"type": "ACTION", "shape": [len(stats["actions"]["mean"])]}
        },
        "chunk_size": int(raw["action_horizon"]),
        "n_action_steps": int(raw["action_horizon"]),
        "max_state_dim": int(raw["action_dim"]),
        "max_action_dim": int(raw["action_dim"]),
        "paligemma_variant": raw["paligemma_variant"],
        "action_expert_variant": raw["action_expert_variant"],
        "dtype": raw.get("precision", "float32"),
        "image_resolution": resolution,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode},
        "layout": "openpi",
    }
    config.update({key: raw[key] for key in _PASSED_ON if key in raw})
    return config
