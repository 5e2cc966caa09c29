"""`SendPolicyInstructions`: a client's `RemotePolicyConfig` checked against the served policy.

LeRobot's server loads whatever checkpoint the client names. This door loads nothing: the
client must name the served policy (its `policy_type`, and as `pretrained_name_or_path` the
folder given to `--model-path` or the `--served-model-name`); another is an error the client
sees, or with `--lerobot-accept-any-policy` a warning in the log. The client's
`lerobot_features` (its robot's `observation.state` joint names and `observation.images.<cam>`
cameras, as LeRobot's `hw_to_dataset_features` writes them) are mapped onto the policy's state
and cameras, each camera through the client's `rename_map` as LeRobot's rename step does.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from vla_server.errors import RequestError
from vla_server.frontend.lerobot_grpc.lerobot_types import RemotePolicyConfig
from vla_server.policies.base import RobotIO

logger = logging.getLogger(__name__)

STATE_KEY = "observation.state"
IMAGES_PREFIX = "observation.images."


@dataclass(frozen=True)
class ServedPolicy:
    """What a client's instructions are checked against."""

    policy_type: str | None
    names: tuple[str, ...]  # accepted `pretrained_name_or_path` values
    robot: RobotIO | None


@dataclass(frozen=True)
class ClientSetup:
    """A client's accepted instructions: where its observation's values go."""

    state_names: tuple[str, ...]  # raw observation keys, in state order
    cameras: dict[str, str]  # raw observation key -> the policy's camera
    actions_per_chunk: int


def served_names(model_path: str, served_model_name: str | None) -> tuple[str, ...]:
    """The folder as given and resolved, and the served name: strings only, the client's
    path is never opened."""
    names = {os.path.normpath(model_path), os.path.realpath(model_path)}
    return tuple(sorted(names | ({served_model_name} if served_model_name else set())))


def check_setup(cfg: Any, served: ServedPolicy, accept_any: bool) -> ClientSetup:
    """The client's setup, or a RequestError naming the `RemotePolicyConfig` field."""
    if not isinstance(cfg, RemotePolicyConfig):
        raise RequestError(f"must be a RemotePolicyConfig, not {type(cfg).__name__}", "data")
    _check_identity(cfg, served, accept_any)
    chunk = cfg.actions_per_chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise RequestError("must be a positive int", "actions_per_chunk")
    features = cfg.lerobot_features
    if not isinstance(features, dict):
        raise RequestError("must be a dict of features", "lerobot_features")
    rename = cfg.rename_map or {}
    if not isinstance(rename, dict):
        raise RequestError("must be a dict of feature key to feature key", "rename_map")
    robot = served.robot or RobotIO(cameras=(), state_dim=0, chunk_size=0)
    state_names: tuple[str, ...] = ()
    cameras: dict[str, str] = {}
    for key, feature in features.items():
        field = f"lerobot_features[{key!r}]"
        if not isinstance(key, str) or not key.startswith("observation"):
            continue  # LeRobot's build_dataset_frame reads only observation features
        dtype, shape, names = _feature(feature, field)
        if key == STATE_KEY and dtype == "float32":
            state_names = _state_names(names, shape, robot.state_dim, field)
        elif key.startswith(IMAGES_PREFIX) and dtype in ("image", "video"):
            cameras[key.removeprefix(IMAGES_PREFIX)] = _camera(key, rename, robot, field)
        else:
            raise RequestError(f"is not a feature this door maps (dtype {dtype!r})", field)
    if robot.state_dim and not state_names:
        raise RequestError(f"has no {STATE_KEY!r}: this policy reads a state", "lerobot_features")
    if len(set(cameras.values())) != len(cameras):
        raise RequestError("two cameras map onto one policy camera", "rename_map")
    return ClientSetup(state_names, cameras, chunk)


def _check_identity(cfg: RemotePolicyConfig, served: ServedPolicy, accept_any: bool) -> None:
    problems = []
    # The served family's own LeRobot type (`describe()["policy_type"]`); None: it has none.
    if cfg.policy_type != served.policy_type:
        serves = served.policy_type or "no LeRobot policy type"
        problems.append(("policy_type", f"{cfg.policy_type!r}: this node serves {serves!r}"))
    name = cfg.pretrained_name_or_path
    if not isinstance(name, str) or (
        name not in served.names and os.path.normpath(name) not in served.names
    ):
        problems.append(
            ("pretrained_name_or_path", f"{name!r} is not served here (serving {served.names})")
        )
    for field, message in problems:
        if not accept_any:
            raise RequestError(f"{message}; this node loads no other checkpoint", field)
        logger.warning(
            "lerobot door: %s: %s (accepted: --lerobot-accept-any-policy)", field, message
        )


def _feature(feature: Any, field: str) -> tuple[str, tuple[int, ...], list[Any] | None]:
    """A dataset feature's dtype, shape and names (LeRobot's client sends plain dicts)."""
    if not isinstance(feature, dict):
        raise RequestError("must be a dataset feature dict (dtype, shape, names)", field)
    dtype, shape, names = feature.get("dtype"), feature.get("shape"), feature.get("names")
    if not isinstance(dtype, str) or not isinstance(shape, tuple | list):
        raise RequestError("needs a str 'dtype' and a 'shape'", field)
    if not all(isinstance(n, int) for n in shape):
        raise RequestError("'shape' must be ints", field)
    return dtype, tuple(shape), names if isinstance(names, list) else None


def _state_names(names: Any, shape: tuple[int, ...], dim: int, field: str) -> tuple[str, ...]:
    if names is None or not all(isinstance(n, str) for n in names) or shape != (len(names),):
        raise RequestError("a state feature needs one str name per value", field)
    if len(names) != dim:
        raise RequestError(f"has {len(names)} values; this policy reads a {dim}-dim state", field)
    return tuple(names)


def _camera(key: str, rename: dict[Any, Any], robot: RobotIO, field: str) -> str:
    target = rename.get(key, key)
    camera = target.removeprefix(IMAGES_PREFIX) if isinstance(target, str) else None
    if camera not in robot.cameras:
        renamed = f" (renamed to {target!r})" if target != key else ""
        raise RequestError(
            f"is not a camera of this policy{renamed}; its cameras: "
            f"{[IMAGES_PREFIX + c for c in robot.cameras]} (map one with rename_map)",
            field,
        )
    return camera
