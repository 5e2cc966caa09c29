"""Checks of recorded LeRobot async-inference traffic against the node, shared by the
`lerobot-client` bench and the CI replay test: the observations a recording sent, each chunk's
reference from `POST /v1/actions` under the door's noise rule, and LeRobot's timing rules.

A recording is the `calls` list the client script writes (`lerobot_client_script.py`): each
call's method, its request messages and its reply (protobuf bytes, base64), in start order.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from vla_server.frontend.lerobot_grpc import wire
from vla_server.frontend.lerobot_grpc.lerobot_types import TimedObservation
from vla_server.frontend.lerobot_grpc.observation import noise_seed
from vla_server.frontend.lerobot_grpc.unpickler import restricted_loads

ObsKey = tuple[int, float]  # (timestep, timestamp): what a chunk names of its observation


@dataclass(frozen=True)
class Chunk:
    timesteps: list[int]
    timestamps: list[float]
    actions: np.ndarray  # [n, action_dim] float32


def messages(call: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(m) for m in call["requests"]]


def observation_of(call: dict[str, Any]) -> TimedObservation:
    """The observation a recorded `SendObservations` call carried."""
    assembler = wire.Reassembler(1 << 30)
    for message in messages(call):
        payload = assembler.feed(wire.decode_observation(message))
        if payload is not None:
            obs, _ = restricted_loads(payload)
            assert isinstance(obs, TimedObservation)
            return obs
    raise ValueError("the call's stream has no TRANSFER_END")


def chunk_of(reply: bytes) -> Chunk | None:
    """A `GetActions` reply (an `Actions` message) as a chunk; None for `Empty`."""
    data = wire.decode_data(reply, "Actions")
    if not data:
        return None
    actions, _ = restricted_loads(data)
    return Chunk(
        [a.timestep for a in actions],
        [a.timestamp for a in actions],
        np.stack([np.asarray(a.action, dtype=np.float32) for a in actions]),
    )


def key(obs: TimedObservation) -> ObsKey:
    return int(obs.timestep), float(obs.timestamp)


def png_base64(frame: np.ndarray) -> str:
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def reference_body(obs: TimedObservation, state_names: list[str]) -> dict[str, Any]:
    """The `/v1/actions` body asking for the chunk the door answers `obs` with: the same
    instruction, frames (by camera name: the recordings name cameras as the policy does) and
    float32 state, and the door's rule's seed."""
    raw = obs.observation
    state = np.array([raw[n] for n in state_names], dtype=np.float32)
    cameras = {k: png_base64(v) for k, v in raw.items() if isinstance(v, np.ndarray)}
    return {
        "instruction": raw["task"],
        "image_data": cameras,
        "state": state.tolist(),
        "seed": noise_seed(*key(obs)),
    }


def timing_problems(chunk: Chunk, obs: TimedObservation, fps: float, length: int) -> list[str]:
    """LeRobot's rules: `length` actions, timestep t + i, timestamp ts + i * (1 / fps)."""
    t, ts = key(obs)
    problems = []
    if len(chunk.timesteps) != length:
        problems.append(f"chunk of obs #{t} has {len(chunk.timesteps)} actions, not {length}")
    if chunk.timesteps != [t + i for i in range(len(chunk.timesteps))]:
        problems.append(f"chunk of obs #{t}: timesteps {chunk.timesteps}")
    if chunk.timestamps != [ts + i * (1 / fps) for i in range(len(chunk.timestamps))]:
        problems.append(f"chunk of obs #{t}: timestamps {chunk.timestamps}")
    return problems
