"""The served policy as SGLang's action API sees it: `GET /v1/actions/metadata`'s
`action.metadata` (SGLang's `protocol.action_metadata` fields, from the checkpoint), and the
normalisation convention a client may choose.

Normalisation: the node normalises the robot state and un-normalises the actions with the
checkpoint's own statistics (LeRobot's or openpi's files), as on every door. SGLang's server does
neither: its clients send normalised state and read normalised actions. A client written that way
sets `runtime.client_normalized: true` (`client_normalized` at the top of a flat payload): its
state is taken as normalised (un-normalised here, so the node's own normalisation gives it back)
and its actions come back normalised with the same statistics. The metadata declares both. A
client sending normalised state without the field gets server normalisation, as anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.frontend.common import served_model_id
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.noise_request import denoise_spec
from vla_server.frontend.robot_socket import model_image_size
from vla_server.policies.base import GuidedFrontend, StatisticsFrontend


@dataclass(frozen=True)
class ServedPolicy:
    cameras: tuple[str, ...]
    state_dim: int
    action_dim: int
    padded_action_dim: int  # the head's width (a denoised chunk's noise is this wide)
    action_horizon: int
    num_inference_steps: int | None
    family: str
    stats: StatisticsFrontend | None  # the checkpoint's statistics, when the family has them

    @classmethod
    def of(cls, node: NodeHandle) -> ServedPolicy:
        tm = node.tokenizer_manager
        policy = tm.policy
        if policy.action_dim is None:
            raise RequestError("this model has no action head", "model")
        about = policy.describe() or {}
        head = denoise_spec(tm)
        return cls(
            cameras=tuple(policy.robot_io.cameras) if policy.robot_io else (),
            state_dim=policy.robot_io.state_dim if policy.robot_io else 0,
            action_dim=policy.action_dim,
            padded_action_dim=head.width if head else policy.action_dim,
            action_horizon=policy.default_num_actions,
            num_inference_steps=about.get("num_inference_steps"),
            family=str(about.get("policy_type") or tm.info.family),
            stats=policy if isinstance(policy, StatisticsFrontend) else None,
        )

    def raw_state(self, normalized: list[float], field: str) -> list[float]:
        """A client-normalised state in robot units (the node normalises it back)."""
        if self.stats is None:
            raise RequestError("this policy has no statistics to un-normalise with", field)
        raw = self.stats.raw_state(np.asarray(normalized, dtype=np.float32))
        return np.asarray(raw, dtype=np.float64).tolist()

    def normalized_actions(self, actions: np.ndarray) -> np.ndarray:
        """Actions in robot units, normalised with the checkpoint's action statistics."""
        assert self.stats is not None  # a client-normalised request was refused without them
        return np.asarray(self.stats.normalized_actions(actions), dtype=np.float32)

    def normalization(self) -> dict[str, Any]:
        modes = {} if self.stats is None else self.stats.normalization_modes()
        return {
            "state": "server",
            "actions": "server",
            **{f"{what}_mode": mode for what, mode in modes.items()},
            "client_normalized_field": "runtime.client_normalized",
            "client_normalized_supported": self.stats is not None,
        }


def action_metadata(node: NodeHandle) -> dict[str, Any]:
    """SGLang's `action.metadata` for the served checkpoint, plus `normalization`."""
    policy = ServedPolicy.of(node)
    return {
        "object": "action.metadata",
        "model": served_model_id(node.config),
        "model_path": node.config.checkpoint.model_path,
        "policy_family": policy.family,
        "input": {
            "image_keys": list(policy.cameras),
            "image_size": model_image_size(node.tokenizer_manager),
            "state_dim": policy.state_dim,
        },
        "output": {
            "action_type": "continuous",
            "action_horizon": policy.action_horizon,
            "action_dim": policy.action_dim,
            "padded_action_dim": policy.padded_action_dim,
            "dtype": "float32",
        },
        "runtime": {"cuda_graph": {"prefix_enabled": False, "action_enabled": False}},
        "defaults": {
            "num_inference_steps": policy.num_inference_steps,
            "prefix_cache": "auto",
            "cuda_graph": False,
        },
        "capabilities": {
            "exact_prefix_cache": True,
            "cuda_graph": False,
            "realtime_websocket": True,
            "openpi_websocket": True,
            "batch_inputs": False,
            "multiple_candidates": False,
            "real_time_chunking": isinstance(node.tokenizer_manager.policy, GuidedFrontend),
        },
        "normalization": policy.normalization(),
    }
