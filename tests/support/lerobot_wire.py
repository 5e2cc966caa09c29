"""A LeRobot async-inference client for tests, without lerobot: gRPC calls with raw message
bytes, and pickles that name LeRobot's classes (as its client writes them)."""

from __future__ import annotations

import io
import pickle
from typing import Any

import grpc

from vla_server.frontend.lerobot_grpc import lerobot_types as lt
from vla_server.frontend.lerobot_grpc.wire import SERVICE, encode_data, encode_observation

HELPERS = "lerobot.async_inference.helpers"
CHUNK = 2 * 1024 * 1024  # LeRobot's transport CHUNK_SIZE
_HELPERS_CLASSES = (lt.TimedObservation, lt.TimedAction, lt.RemotePolicyConfig)


class _LeRobotPickler(pickle._Pickler):  # type: ignore[name-defined]
    helpers = HELPERS

    def save_global(self, obj: Any, name: str | None = None) -> None:
        if obj in _HELPERS_CLASSES:
            module = self.helpers
        elif obj in (lt.PolicyFeature, lt.FeatureType):
            module = "lerobot.configs.types"
        else:
            return super().save_global(obj, name)
        self.save(module)
        self.save(obj.__name__)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]
    dispatch[type] = save_global


def lerobot_pickle(obj: Any, helpers: str = HELPERS) -> bytes:
    """`obj` pickled as LeRobot's client would (`helpers`: its helpers module path)."""
    out = io.BytesIO()
    pickler = _LeRobotPickler(out, protocol=4)
    pickler.helpers = helpers
    pickler.dump(obj)
    return out.getvalue()


def chunks(payload: bytes, size: int = CHUNK) -> list[bytes]:
    """LeRobot's `send_bytes_in_chunks`: one END, or BEGIN, MIDDLE..., END (encoded)."""
    out, sent = [], 0
    while sent < len(payload):
        state = 2
        if sent + size >= len(payload):
            state = 3
        elif sent == 0:
            state = 1
        out.append(encode_observation(state, payload[sent : sent + size]))
        sent += size
    return out


class RawClient:
    """The four RPCs over a channel, taking and returning encoded messages."""

    def __init__(self, port: int, metadata: tuple[tuple[str, str], ...] = ()):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.metadata = metadata

    def call(self, method: str, message: bytes, timeout: float = 30) -> bytes:
        """A unary RPC with an encoded request; its encoded reply."""
        unary = self.channel.unary_unary(f"/{SERVICE}/{method}")
        return unary(message, metadata=self.metadata, timeout=timeout)

    def ready(self) -> bytes:
        return self.call("Ready", b"")

    def policy(self, payload: bytes) -> bytes:
        return self.call("SendPolicyInstructions", encode_data(payload))

    def observe_messages(self, messages: list[bytes]) -> bytes:
        call = self.channel.stream_unary(f"/{SERVICE}/SendObservations")
        return call(iter(messages), metadata=self.metadata, timeout=30)

    def observe(self, payload: bytes) -> bytes:
        return self.observe_messages(chunks(payload))

    def get_actions(self, timeout: float = 120) -> bytes:
        return self.call("GetActions", b"", timeout)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
