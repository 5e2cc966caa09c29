"""A LeRobot `TimedObservation` -> the node's action query (`ActionsBody`), and its noise seed.

The observation is `robot.get_observation()` plus `"task"`: one float per joint (the state
feature's names, in that order, as LeRobot's `build_dataset_frame` reads them), one uint8
`[H, W, 3]` frame per camera, and the instruction. Each value is checked here, so a bad one is
an error naming it (`observation['shoulder_pan.pos']`) when it is sent, not when it is run.

Noise rule. LeRobot's protocol carries no seed; a chunk for the observation with timestep `t`
and timestamp `ts` (the client's `time.time()`) is denoised from the noise of

    seed = blake2b("{t}\\0{ts!r}", digest_size=8, person=b"vla-lerobot-seed"),
           little-endian, low 31 bits

(`ts!r`: Python's shortest round-trip repr of the float). Every chunk names its observation's
`t` and `ts` (its first action's timestep and timestamp), so anyone can recompute the seed and
ask `/v1/actions` for the same chunk; replaying an observation replays its chunk.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_server.errors import RequestError
from vla_server.frontend.action_request import ActionsBody
from vla_server.frontend.lerobot_grpc.lerobot_types import TimedObservation
from vla_server.frontend.lerobot_grpc.policy_setup import ClientSetup
from vla_server.frontend.openpi_observation import to_rgb_uint8


def noise_seed(timestep: int, timestamp: float) -> int:
    digest = hashlib.blake2b(digest_size=8, person=b"vla-lerobot-seed")
    digest.update(f"{timestep}\0{timestamp!r}".encode())
    return int.from_bytes(digest.digest(), "little") & 0x7FFF_FFFF


@dataclass(frozen=True)
class Observed:
    """One checked observation: its timing, LeRobot's flags, the query it asks, its state."""

    timestep: int
    timestamp: float
    must_go: bool
    body: ActionsBody
    state: np.ndarray  # float32, for LeRobot's "too similar to the last one" check


def read_observation(obs: Any, setup: ClientSetup) -> Observed:
    """The observation as a query, or a RequestError naming the field."""
    if not isinstance(obs, TimedObservation):
        raise RequestError(f"must be a TimedObservation, not {type(obs).__name__}", "data")
    timestep, timestamp = obs.timestep, obs.timestamp
    if isinstance(timestep, bool) or not isinstance(timestep, int | np.integer):
        raise RequestError("must be an int", "timestep")
    if not isinstance(timestamp, float | int) or not math.isfinite(timestamp):
        raise RequestError("must be a finite float", "timestamp")
    raw = obs.observation
    if not isinstance(raw, dict):
        raise RequestError("must be a dict", "observation")
    _check_keys(raw, setup)
    task = raw.get("task")
    if not isinstance(task, str) or not task.strip():
        raise RequestError("must be a non-empty instruction (the client's --task)", _f("task"))
    state = np.array([_number(raw, name) for name in setup.state_names], dtype=np.float32)
    images = {camera: to_rgb_uint8(raw[key], _f(key)) for key, camera in setup.cameras.items()}
    body = ActionsBody(
        instruction=task,
        image_data=images,
        state=state.tolist() if setup.state_names else None,
        seed=noise_seed(int(timestep), float(timestamp)),
    )
    return Observed(int(timestep), float(timestamp), bool(obs.must_go), body, state)


def _f(key: Any) -> str:
    return f"observation[{key!r}]"


def _check_keys(raw: dict[Any, Any], setup: ClientSetup) -> None:
    known = {*setup.state_names, *setup.cameras, "task"}
    missing = [k for k in (*setup.state_names, *setup.cameras) if k not in raw]
    if missing:
        raise RequestError("is missing (declared in the client's lerobot_features)", _f(missing[0]))
    unknown = [k for k in raw if k not in known]
    if unknown:
        raise RequestError(
            "is not in the client's lerobot_features (not a joint or camera of this setup)",
            _f(unknown[0]),
        )


def _number(raw: dict[Any, Any], name: str) -> float:
    value = raw[name]
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise RequestError(f"must be a number, not {type(value).__name__}", _f(name))
    if not math.isfinite(float(value)):
        raise RequestError("must be finite", _f(name))
    return float(value)
