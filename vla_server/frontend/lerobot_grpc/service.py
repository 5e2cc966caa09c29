"""The four RPCs of `transport.AsyncInference`, with LeRobot's `PolicyServer` semantics, on
the node's one action query.

* `Ready` resets the door's state (the observation slot, the answered timesteps), as LeRobot's
  does for every client: the state is the door's, not a connection's. It also forgets the last
  observation run (LeRobot keeps it), so a new client's first observations are not compared
  with another's. The accepted policy instructions stay, as in LeRobot.
* `SendPolicyInstructions` checks the client's `RemotePolicyConfig` (`policy_setup.py`).
* `SendObservations` reassembles one pickled `TimedObservation` from its chunks, reads it
  (`observation.py`) and offers it to a slot of one, newest first. Unless `must_go`, it is
  skipped when its timestep was already answered or its state is within L2 1.0 of the last
  observation run (LeRobot's `observations_similar`).
* `GetActions` waits up to `--lerobot-obs-queue-timeout` for an observation, runs it as the
  node's action query (the same path as `/v1/actions`, noise from `observation.noise_seed`),
  and replies its first `actions_per_chunk` actions as `TimedAction`s; with nothing to run it
  replies `Empty`.

Each RPC returns its reply bytes or raises `RequestError` (the field named); `server.py` turns
that into a gRPC status. Two differences from LeRobot, both deliberate: a query that fails is
an error status the client logs (LeRobot logs it on the server and replies `Empty`), and a
chunk is replied as soon as it is ready (LeRobot's `--inference_latency` pacing, a sleep up to
1/30 s, is not imitated).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from vla_server.errors import RequestError
from vla_server.frontend.lerobot_grpc import wire
from vla_server.frontend.lerobot_grpc.observation import Observed, read_observation
from vla_server.frontend.lerobot_grpc.policy_setup import ClientSetup, ServedPolicy, check_setup
from vla_server.frontend.lerobot_grpc.reply import pickle_actions, timed_actions
from vla_server.frontend.lerobot_grpc.unpickler import RefusedPickle, restricted_loads
from vla_server.frontend.openpi_policy import infer
from vla_server.frontend.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)
SIMILAR_STATE_L2 = 1.0  # LeRobot's observations_similar(atol=1)


@dataclass(frozen=True)
class DoorSettings:
    served: ServedPolicy
    accept_any_policy: bool
    fps: float
    obs_queue_timeout: float
    max_payload_bytes: int


@dataclass
class DoorState:
    """What LeRobot's PolicyServer keeps between calls."""

    pending: Observed | None = None
    answered: set[int] = field(default_factory=set)
    last_run: Observed | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


class AsyncInferenceDoor:
    def __init__(self, tm: TokenizerManager, settings: DoorSettings):
        self.tm, self.settings = tm, settings
        self.setup: ClientSetup | None = None
        self.helpers_module: str | None = None  # the client's LeRobot module path
        self.state = DoorState()

    def ready(self, request: bytes, peer: str) -> bytes:
        wire.decode_empty(request)
        logger.info("lerobot door: client %s ready; state reset", peer)
        self.state = DoorState()
        return b""

    def policy_instructions(self, request: bytes, peer: str) -> bytes:
        payload = wire.decode_data(request, "PolicySetup")
        cfg = self._load(payload, peer)
        self.setup = check_setup(cfg, self.settings.served, self.settings.accept_any_policy)
        logger.info("lerobot door: client %s set up: %s", peer, self.setup)
        return b""

    async def observations(self, stream: AsyncIterator[bytes], peer: str) -> bytes:
        assembler = wire.Reassembler(self.settings.max_payload_bytes)
        payload = None
        async for message in stream:
            payload = assembler.feed(wire.decode_observation(message))
            if payload is not None:
                break  # LeRobot reads one payload per call
        if payload is None:
            raise RequestError("the stream ended before TRANSFER_END", "Observation")
        if self.setup is None:
            raise RequestError("call SendPolicyInstructions first", "PolicySetup", 412)
        observed = read_observation(self._load(payload, peer), self.setup)
        if self._admit(observed):
            self.state.pending = observed
            self.state.arrived.set()
        else:
            logger.debug("lerobot door: observation #%d skipped", observed.timestep)
        return b""

    def _admit(self, obs: Observed) -> bool:
        last = self.state.last_run
        if obs.must_go or last is None:
            return True
        if obs.timestep in self.state.answered:
            return False
        return not float(np.linalg.norm(obs.state - last.state)) < SIMILAR_STATE_L2

    async def actions(self, request: bytes, peer: str) -> bytes:
        wire.decode_empty(request)
        state = self.state
        obs = await self._next_observation(state)
        if obs is None:
            return b""  # Empty: nothing to run within the timeout
        state.answered.add(obs.timestep)
        state.last_run = obs
        out = await infer(self.tm, obs.body)
        assert self.setup is not None
        chunk = out["actions"][: self.setup.actions_per_chunk]
        actions = timed_actions(chunk, obs.timestamp, obs.timestep, self.settings.fps)
        return wire.encode_data(pickle_actions(actions, self.helpers_module))

    async def _next_observation(self, state: DoorState) -> Observed | None:
        if state.pending is None:
            state.arrived.clear()
            try:
                await asyncio.wait_for(state.arrived.wait(), self.settings.obs_queue_timeout)
            except TimeoutError:
                return None
        obs, state.pending = state.pending, None
        return obs

    def _load(self, payload: bytes, peer: str) -> object:
        """The payload through the restricted unpickler; a refusal is logged with its reason."""
        try:
            obj, module = restricted_loads(payload)
        except RefusedPickle as e:
            logger.warning("lerobot door: refused a pickle from %s: %s", peer, e)
            raise RequestError(f"refused: {e}", "data") from None
        except KeyError as e:  # the pure-Python unpickler's way to say "unknown opcode"
            raise RequestError(f"not a readable pickle: unknown opcode {e}", "data") from None
        except Exception as e:  # malformed bytes: pickle, EOF, type and value errors
            raise RequestError(f"not a readable pickle: {type(e).__name__}: {e}", "data") from None
        if module is not None:
            self.helpers_module = module
        return obj
