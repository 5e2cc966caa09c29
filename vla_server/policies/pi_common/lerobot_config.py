"""A LeRobot policy folder's `config.json` (draccus `PreTrainedConfig`), for the pi family.

LeRobot saves its policies with a `"type"` key instead of a transformers `model_type`:
`"pi0_fast"`, `"pi0"` or `"pi05"`. The keys read, as LeRobot's `PI0FastConfig`, `PI0Config` and
`PI05Config` define them (missing keys take that type's defaults: `tokenizer_max_length` 200,
48 for pi0; `normalization_mapping` QUANTILES for state and action, MEAN_STD for pi0):

* `input_features`: `observation.images.<camera>` entries of type VISUAL (their order is the
  camera order of the prompt; LeRobot's `empty_camera_N` placeholders are always masked, so
  they are left out) and `observation.state` (STATE, its shape the state dimension);
* `output_features.action.shape[0]`: the action dimension a robot receives;
* `chunk_size`, `n_action_steps`, `max_state_dim`, `max_action_dim`, `tokenizer_max_length`,
  `max_decoding_steps`, `fast_skip_tokens`, `empty_cameras`, `image_resolution`, `dtype`;
  pi0/pi0.5: `num_inference_steps`, `min_period`, `max_period` (the time embedding);
* `paligemma_variant` names the backbone and `action_expert_variant` the flow policies' action
  expert (`model/paligemma_config.py`) unless a `vlm_config` / `dit_config` dict (transformers'
  PaliGemma config / the Gemma config `PI0Config.dit_config`) describes it, as the project's tiny
  checkpoints do;
* `text_tokenizer_name`, `action_tokenizer_name`: hub ids or local folders; files inside the
  checkpoint folder (its root, `fast_tokenizer/`) take precedence, as hub ids cannot be
  resolved offline.

An openpi PyTorch conversion (no `"type"`) is described as the same kind of config by its
family (`pi0/openpi_config.py`), so a family reads every folder it serves through this spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vla_server.policies.pi_common.lerobot_features import ACTION_KEY, IMAGE_PREFIX, STATE_KEY

_DEFAULTS: dict[str, Any] = {
    "paligemma_variant": "gemma_2b",
    "action_expert_variant": "gemma_300m",
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
    "num_inference_steps": 10,
    "min_period": 4e-3,
    "max_period": 4.0,
}
_FLOW_ARCHITECTURE = (
    "policy_type",
    "chunk_size",
    "max_state_dim",
    "max_action_dim",
    "action_expert_variant",
    "dit_config",
    "min_period",
    "max_period",
)
# Where a type's defaults differ from the others' (LeRobot's PI0Config).
_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "pi0": {
        "tokenizer_max_length": 48,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
    },
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
    # pi0 / pi0.5: Euler steps per chunk, the expert's dimensions (a named variant, or
    # transformers' `PI0Config.dit_config` Gemma dict), the sinusoidal time embedding's periods.
    num_inference_steps: int = 10
    action_expert_variant: str = "gemma_300m"
    dit_config: dict[str, Any] | None = None
    min_period: float = 4e-3
    max_period: float = 4.0

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> LeRobotPolicySpec:
        cfg = {**_DEFAULTS, **_TYPE_DEFAULTS.get(str(raw.get("type")), {}), **raw}
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
            num_inference_steps=int(cfg["num_inference_steps"]),
            action_expert_variant=str(cfg["action_expert_variant"]),
            dit_config=cfg.get("dit_config"),
            min_period=float(cfg["min_period"]),
            max_period=float(cfg["max_period"]),
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
        if self.num_inference_steps < 1:
            raise ValueError(
                f"config.json: num_inference_steps {self.num_inference_steps} must be >= 1"
            )
        if not 0 < self.min_period < self.max_period:
            raise ValueError(
                f"config.json: the time embedding's periods ({self.min_period}, "
                f"{self.max_period}) must satisfy 0 < min_period < max_period"
            )
        if self.state_dim > self.max_state_dim:
            raise ValueError(
                f"config.json: the state has {self.state_dim} dims, max_state_dim is "
                f"{self.max_state_dim}"
            )

    def flow_differences(self, other: LeRobotPolicySpec) -> list[str]:
        """Fields in which `other` is a flow policy that computes differently (its weights
        could not replace this one's)."""
        return [
            f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}"
            for name in _FLOW_ARCHITECTURE
            if getattr(self, name) != getattr(other, name)
        ]

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
