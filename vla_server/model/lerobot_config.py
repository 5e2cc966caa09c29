"""A LeRobot policy folder's `config.json` (draccus `PreTrainedConfig`), for the pi family.

LeRobot saves its policies with a `"type"` key instead of a transformers `model_type`:
`"pi0_fast"` here (issue 17 adds `"pi0"` and `"pi05"`). The keys read, as LeRobot's
`PI0FastConfig` defines them (missing keys take its defaults):

* `input_features`: `observation.images.<camera>` entries of type VISUAL (their order is the
  camera order of the prompt; LeRobot's `empty_camera_N` placeholders are always masked, so
  they are left out) and `observation.state` (STATE, its shape the state dimension);
* `output_features.action.shape[0]`: the action dimension a robot receives;
* `chunk_size`, `n_action_steps`, `max_state_dim`, `max_action_dim`, `tokenizer_max_length`,
  `max_decoding_steps`, `fast_skip_tokens`, `empty_cameras`, `image_resolution`, `dtype`;
* `paligemma_variant` names the backbone (`model/paligemma_config.py`) unless a `vlm_config`
  dict (a transformers PaliGemma config) describes it, as the project's tiny checkpoints do;
* `text_tokenizer_name`, `action_tokenizer_name`: hub ids or local folders; files inside the
  checkpoint folder (its root, `fast_tokenizer/`) take precedence, as hub ids cannot be
  resolved offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEROBOT_PI_TYPES = ("pi0_fast",)
IMAGE_PREFIX = "observation.images."
STATE_KEY = "observation.state"
ACTION_KEY = "action"
_DEFAULTS: dict[str, Any] = {
    "paligemma_variant": "gemma_2b",
    "dtype": "float32",
    "chunk_size": 50,
    "n_action_steps": 50,
    "max_state_dim": 32,
    "max_action_dim": 32,
    "image_resolution": [224, 224],
    "empty_cameras": 0,
    "tokenizer_max_length": 200,
    "max_decoding_steps": 256,
    "fast_skip_tokens": 128,
    "text_tokenizer_name": "google/paligemma-3b-pt-224",
    "action_tokenizer_name": "lerobot/fast-action-tokenizer",
    "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"},
}


@dataclass(frozen=True)
class LeRobotPolicySpec:
    """What serving a LeRobot pi-family policy needs from its `config.json`."""

    policy_type: str
    cameras: tuple[str, ...]  # camera names (after `observation.images.`), in config order
    image_resolution: tuple[int, int]  # (height, width) images are resized and padded to
    state_dim: int  # 0: the policy takes no state
    action_dim: int
    chunk_size: int
    n_action_steps: int
    max_state_dim: int
    max_action_dim: int
    tokenizer_max_length: int
    max_decoding_steps: int
    fast_skip_tokens: int
    text_tokenizer_name: str
    action_tokenizer_name: str
    paligemma_variant: str
    vlm_config: dict[str, Any] | None
    dtype: str
    normalization_mapping: dict[str, str]  # feature type -> mode, when a processor names none

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> LeRobotPolicySpec:
        cfg = {**_DEFAULTS, **raw}
        features = cfg.get("input_features") or {}
        cameras = tuple(
            key.removeprefix(IMAGE_PREFIX)
            for key, feature in features.items()
            if key.startswith(IMAGE_PREFIX)
            and _kind(feature) == "VISUAL"
            and not key.startswith(IMAGE_PREFIX + "empty_camera_")
        )
        if not cameras:
            raise ValueError("config.json: input_features has no observation.images.* camera")
        action = (cfg.get("output_features") or {}).get(ACTION_KEY)
        if action is None:
            raise ValueError("config.json: output_features has no 'action'")
        height, width = (int(v) for v in cfg["image_resolution"])
        spec = cls(
            policy_type=str(cfg["type"]),
            cameras=cameras,
            image_resolution=(height, width),
            state_dim=_first_dim(features.get(STATE_KEY)),
            action_dim=_first_dim(action),
            chunk_size=int(cfg["chunk_size"]),
            n_action_steps=int(cfg["n_action_steps"]),
            max_state_dim=int(cfg["max_state_dim"]),
            max_action_dim=int(cfg["max_action_dim"]),
            tokenizer_max_length=int(cfg["tokenizer_max_length"]),
            max_decoding_steps=int(cfg["max_decoding_steps"]),
            fast_skip_tokens=int(cfg["fast_skip_tokens"]),
            text_tokenizer_name=str(cfg["text_tokenizer_name"]),
            action_tokenizer_name=str(cfg["action_tokenizer_name"]),
            paligemma_variant=str(cfg["paligemma_variant"]),
            vlm_config=cfg.get("vlm_config"),
            dtype=str(cfg["dtype"]),
            normalization_mapping=dict(cfg["normalization_mapping"]),
        )
        spec.check()
        return spec

    def check(self) -> None:
        if self.action_dim < 1 or self.chunk_size < 1 or self.max_decoding_steps < 1:
            raise ValueError(
                "config.json: the action dim, chunk_size and max_decoding_steps must be >= 1"
            )
        if self.fast_skip_tokens < 0:
            raise ValueError(f"config.json: fast_skip_tokens {self.fast_skip_tokens} is negative")
        if self.state_dim > self.max_state_dim:
            raise ValueError(
                f"config.json: the state has {self.state_dim} dims, max_state_dim is "
                f"{self.max_state_dim}"
            )

    @property
    def is_flow(self) -> bool:
        """pi0 / pi0.5: a flow-matching action expert, not action tokens."""
        return self.policy_type in ("pi0", "pi05")

    def camera_key(self, name: str) -> str:
        return IMAGE_PREFIX + name


def _kind(feature: Any) -> str | None:
    return feature.get("type") if isinstance(feature, dict) else None


def _first_dim(feature: Any) -> int:
    if feature is None:
        return 0
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if not shape:
        raise ValueError(f"config.json: feature {feature!r} has no shape")
    return int(shape[0])


def read_lerobot_config(path: str | Path) -> dict[str, Any] | None:
    """The folder's `config.json` when it is a LeRobot pi-family policy, else None."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    raw = json.loads(config.read_text())
    return raw if raw.get("type") in LEROBOT_PI_TYPES else None


def lerobot_spec(path: str | Path) -> LeRobotPolicySpec | None:
    raw = read_lerobot_config(path)
    return None if raw is None else LeRobotPolicySpec.from_config(raw)
