"""The actions of LeRobot's flow policies (pi0, pi0.5, SmolVLA): what an action request on a
flow-matching policy needs beside the model (the OpenVLA counterpart: `ActionTokenizer`;
pi0-FAST's: `FastActionTokenizer`).

* State: raw robot state, normalised with the checkpoint's statistics. pi0 feeds it to its
  state token, zero-padded to `max_state_dim`; pi0.5 writes it into the prompt, discretised
  into 256 bins over [-1, 1] from the unpadded normalised values (`np.digitize` without
  clipping: below -1 gives -1, above 1 gives 255). SmolVLA, like pi0, projects the padded
  normalised state into a token (the last of its prompt).
* Noise: the documented seeded rule of every denoising head (`model/denoise.initial_noise`).
* Chunk: the denoised `[chunk_size, max_action_dim]`, its first `action_dim` dims unnormalised.
* Real-time chunking: the robot's previous chunk, raw, normalised the other way with the same
  action statistics and zero-padded (`prev_chunk_target`), the target the chunk is guided to.

Statistics: openpi's `assets/<id>/norm_stats.json` for a folder openpi's conversion wrote, else
LeRobot's processor files (none: values pass through, as LeRobot does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.lerobot_normalizer import FeatureNormalizer, policy_normalizers
from vla_server.policies.pi_common.openpi_norm_stats import openpi_normalizers
from vla_server.policies.pi_common.policy_inputs import discretize_state


class FlowActionPolicy:
    kind = "flow"

    def __init__(
        self, spec: LeRobotPolicySpec, state_norm: FeatureNormalizer, action_norm: FeatureNormalizer
    ):
        self.spec = spec
        self.state_norm, self.action_norm = state_norm, action_norm
        self.action_dim = spec.action_dim
        self.horizon = spec.chunk_size

    @classmethod
    def from_folder(cls, folder: Path, spec: LeRobotPolicySpec, openpi: bool) -> FlowActionPolicy:
        """`openpi`: the folder is openpi's conversion (its statistics are openpi's)."""
        if openpi:
            norms = openpi_normalizers(folder, spec.normalization_mapping["STATE"])
        else:
            norms = policy_normalizers(folder, spec.normalization_mapping)
        return cls(spec, *norms)

    @property
    def state_in_prompt(self) -> bool:
        return self.spec.policy_type == "pi05"

    def normalized_state(self, state: list[float]) -> np.ndarray:
        return self.state_norm.normalize(np.asarray(state, dtype=np.float32))

    def state_vector(self, state: list[float]) -> np.ndarray:
        """pi0's state token input: float32 [max_state_dim], normalised, zero-padded."""
        out = np.zeros(self.spec.max_state_dim, dtype=np.float32)
        out[: len(state)] = self.normalized_state(state)
        return out

    def state_bins(self, state: list[float]) -> list[int]:
        return discretize_state(self.normalized_state(state))

    def unnormalize(self, chunk: np.ndarray) -> np.ndarray:
        """float32 [chunk_size, max_action_dim] model output -> [chunk_size, action_dim]."""
        return self.action_norm.unnormalize(chunk[:, : self.action_dim]).astype(np.float32)

    def prev_chunk_target(self, prev_chunk: np.ndarray) -> np.ndarray:
        """Real-time chunking's target (`policies.base.GuidedFrontend`): the robot's previous
        chunk [n, k] (raw, k <= action_dim, n <= chunk_size) normalised with the action
        statistics as LeRobot normalises actions, its other dims 0 up to `max_action_dim`
        (LeRobot pads the left-over chunk with zeros), float32 [n, max_action_dim]."""
        rows, dims = prev_chunk.shape
        if dims > self.action_dim:
            raise RequestError(
                f"has {dims} values per action; the policy's actions have {self.action_dim}",
                "prev_chunk",
            )
        if rows > self.horizon:
            raise RequestError(
                f"has {rows} actions; the policy's chunk has {self.horizon}", "prev_chunk"
            )
        raw = np.zeros((rows, self.action_dim), dtype=np.float32)
        raw[:, :dims] = prev_chunk
        out = np.zeros((rows, self.spec.max_action_dim), dtype=np.float32)
        out[:, :dims] = self.action_norm.normalize(raw)[:, :dims]
        if not np.isfinite(out).all():
            raise RequestError("is not finite once normalised by the statistics", "prev_chunk")
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "policy_type": self.spec.policy_type,
            "action_dim": self.action_dim,
            "chunk_size": self.horizon,
            "num_inference_steps": self.spec.num_inference_steps,
            "cameras": list(self.spec.cameras),
            "state_dim": self.spec.state_dim,
        }


class FlowStatistics:
    """`policies.base.StatisticsFrontend` for a front end holding a FlowActionPolicy."""

    policy: FlowActionPolicy

    def raw_state(self, normalized: np.ndarray) -> np.ndarray:
        return self.policy.state_norm.unnormalize(normalized)

    def normalized_actions(self, actions: np.ndarray) -> np.ndarray:
        return self.policy.action_norm.normalize(actions)

    def normalization_modes(self) -> dict[str, str]:
        return {"state": self.policy.state_norm.mode, "actions": self.policy.action_norm.mode}
