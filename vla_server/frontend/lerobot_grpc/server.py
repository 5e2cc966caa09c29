"""The LeRobot door's gRPC server (`--lerobot-grpc-port`): `grpc.aio` on the HTTP server's own
event loop, in the main process.

Why the same loop rather than a thread: the TokenizerManager is an asyncio object of that loop
(its request states, its ZMQ sockets), so a handler that awaits `infer` there reaches the same
action path as `/v1/actions` with no cross-thread hop, and the door's state needs no lock. A
slow query never blocks the loop: inference is an await, as for every other door.

Each call: the API key (with `--api-key`, metadata `authorization: Bearer KEY` or `Api-Key KEY`;
LeRobot's `RobotClient` sends no metadata, so it cannot use a node that has a key), then the
RPC (`service.py`), then the count in `vla_http_requests_total` under the route
`grpc:/transport.AsyncInference/<Method>` with the HTTP status of the outcome (200, 400 bad
input, 401 no key, 412 no policy set up, 500 failure), as every other door counts.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from vla_server.config import FrontendConfig
from vla_server.errors import RequestError
from vla_server.frontend.action_request import ActionFailed
from vla_server.frontend.common import served_model_id
from vla_server.frontend.lerobot_grpc.policy_setup import ServedPolicy, served_names
from vla_server.frontend.lerobot_grpc.service import AsyncInferenceDoor, DoorSettings
from vla_server.frontend.lerobot_grpc.wire import SERVICE
from vla_server.frontend.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)

# gRPC's per-message cap; LeRobot sends payloads in 2 MiB chunks and replies fit easily.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    412: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


def route(method: str) -> str:
    return f"grpc:/{SERVICE}/{method}"


class _Call:
    """Wraps one RPC: key check, error to status, the count."""

    def __init__(self, tm: TokenizerManager, api_key: str | None, method: str):
        self.tm, self.api_key, self.method = tm, api_key, method

    def authorized(self, context: grpc.aio.ServicerContext) -> bool:
        if not self.api_key:
            return True
        got = dict(context.invocation_metadata() or ()).get("authorization", "")
        got_bytes = got.encode() if isinstance(got, str) else bytes(got)
        return any(
            hmac.compare_digest(got_bytes, f"{scheme} {self.api_key}".encode())
            for scheme in ("Bearer", "Api-Key")
        )

    async def run(self, context: grpc.aio.ServicerContext, work: Awaitable[bytes]) -> bytes:
        status = 200
        try:
            if not self.authorized(context):
                raise RequestError("missing or wrong API key", "authorization", 401)
            return await work
        except RequestError as e:
            status = e.status_code
            code = _STATUS.get(status, grpc.StatusCode.INTERNAL)
            context.set_code(code)
            context.set_details(f"{e.field}: {e.message}" if e.field else e.message)
            return b""
        except ActionFailed as e:
            status = 500
            logger.warning("lerobot door: action decoding failed: %s", e)
            context.set_code(grpc.StatusCode.INTERNAL)
            context.set_details("internal inference error")
            return b""
        finally:
            self.tm.metrics.http_requests.labels(route(self.method), str(status)).inc()


def _handlers(door: AsyncInferenceDoor, tm: TokenizerManager, key: str | None) -> Any:
    def unary(method: str, fn: Callable[[bytes, str], Any]) -> grpc.RpcMethodHandler:
        call = _Call(tm, key, method)

        async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            async def work() -> bytes:
                out = fn(request, context.peer())
                return await out if isinstance(out, Awaitable) else out

            return await call.run(context, work())

        return grpc.unary_unary_rpc_method_handler(handle)

    observations = _Call(tm, key, "SendObservations")

    async def send_observations(
        stream: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> bytes:
        return await observations.run(context, door.observations(stream, context.peer()))

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Ready": unary("Ready", door.ready),
            "SendPolicyInstructions": unary("SendPolicyInstructions", door.policy_instructions),
            "SendObservations": grpc.stream_unary_rpc_method_handler(send_observations),
            "GetActions": unary("GetActions", door.actions),
        },
    )


def door_settings(tm: TokenizerManager, config: FrontendConfig) -> DoorSettings:
    described = tm.policy.describe() or {}
    served = ServedPolicy(
        policy_type=described.get("policy_type"),
        names=served_names(config.checkpoint.model_path, served_model_id(config)),
        robot=tm.policy.robot_io,
    )
    return DoorSettings(
        served=served,
        accept_any_policy=config.lerobot_accept_any_policy,
        fps=config.lerobot_fps,
        obs_queue_timeout=config.lerobot_obs_queue_timeout,
        max_payload_bytes=config.max_request_bytes,
    )


async def start_lerobot_door(tm: TokenizerManager, config: FrontendConfig) -> grpc.aio.Server:
    """The door's server, started on the running loop; raises if the port cannot be bound."""
    assert config.lerobot_grpc_port is not None
    door = AsyncInferenceDoor(tm, door_settings(tm, config))
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a port already in use is an error, not shared
        ]
    )
    server.add_generic_rpc_handlers((_handlers(door, tm, config.api_key),))
    host = f"[{config.host}]" if ":" in config.host else config.host
    address = f"{host}:{config.lerobot_grpc_port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError as e:
        raise RuntimeError(f"--lerobot-grpc-port: cannot bind {address}: {e}") from None
    await server.start()
    logger.info("LeRobot async inference door (gRPC %s) on %s", SERVICE, address)
    return server
