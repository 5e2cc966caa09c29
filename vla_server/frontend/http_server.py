"""The HTTP front end (FastAPI + uvicorn), SGLang-compatible routes on one TokenizerManager."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from vla_server.errors import RequestError
from vla_server.frontend.actions_api import add_actions_routes
from vla_server.frontend.auth import ApiKeyMiddleware
from vla_server.frontend.body_limit import BodyLimit
from vla_server.frontend.common import (
    SSE_DONE,
    EventStream,
    close_response,
    finish_error,
    json_response,
    request_body,
    sse,
)
from vla_server.frontend.generate_request import GenerateItem, normalize, parse_body
from vla_server.frontend.http_metrics import RequestCounter
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.openai_api import add_openai_routes
from vla_server.frontend.openpi_policy import add_openpi_routes
from vla_server.frontend.robot_socket import add_robot_socket_route
from vla_server.frontend.sglang_action_api import add_sglang_action_routes
from vla_server.frontend.stream_output import stream_shaper
from vla_server.frontend.tokenizer_manager import ClientDisconnected, TokenizerManager
from vla_server.model.sampling import SamplingParams

logger = logging.getLogger(__name__)

HEALTH_GENERATE_TIMEOUT_S = 20.0
# What GET /get_model_info reports of the scheduler's start-up report.
MODEL_INFO_KEYS = (
    "architectures",
    "vocab_size",
    "hidden_size",
    "context_len",
    "dtype",
    "device",
    "attention_backend",
)


class AbortBody(msgspec.Struct, forbid_unknown_fields=True):
    rid: str = ""
    abort_all: bool = False


class PauseBody(msgspec.Struct, forbid_unknown_fields=True):
    mode: str = "abort"


class UpdateWeightsBody(msgspec.Struct, forbid_unknown_fields=True):
    model_path: str


class CloseSessionBody(msgspec.Struct, forbid_unknown_fields=True):
    session_id: str


class EmptyBody(msgspec.Struct, forbid_unknown_fields=True):
    pass


def create_app(node: NodeHandle) -> FastAPI:
    app = FastAPI(title="vla-server", lifespan=_lifespan(node))
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(ClientDisconnected, _client_gone)
    app.add_middleware(BodyLimit, max_bytes=node.config.max_request_bytes)
    app.add_exception_handler(ClientDisconnect, _client_gone)  # gone while sending the body
    if node.config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=node.config.api_key)
    # Added last, so outermost: a request refused for its API key is counted too.
    app.add_middleware(RequestCounter, counter=node.tokenizer_manager.metrics.http_requests)
    add_generate_route(app, node.tokenizer_manager)
    add_info_routes(app, node)
    add_load_route(app, node.tokenizer_manager)
    add_openai_routes(app, node)
    add_actions_routes(app, node)
    add_openpi_routes(app, node)
    add_robot_socket_route(app, node)
    add_sglang_action_routes(app, node)
    add_control_routes(app, node.tokenizer_manager)
    return app


def _lifespan(node: NodeHandle) -> Any:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        node.tokenizer_manager.ensure_loops()
        door = None
        if node.config.lerobot_grpc_port is not None:
            # Imported here: grpcio is the `lerobot` extra, needed only with this flag.
            from vla_server.frontend.lerobot_grpc.server import start_lerobot_door

            door = await start_lerobot_door(node.tokenizer_manager, node.config)
        yield
        if door is not None:
            await door.stop(grace=1.0)
        # Runs after uvicorn has drained in-flight requests (see run_server); the node stops
        # here, so that it is down before uvicorn re-delivers the signal it drained for.
        node.shutdown()
        logger.info("node stopped")

    return lifespan


async def _request_error(_: Request, e: RequestError) -> Response:
    return json_response(e.to_json(), e.status_code)


async def _client_gone(_: Request, e: Exception) -> Response:
    """The caller left before the first byte of its answer (nginx's 499): its request was
    aborted when it left; nothing is sent, the access log and the counter say 499."""
    return Response(status_code=499)


def add_generate_route(app: FastAPI, tm: TokenizerManager) -> None:
    @app.post("/generate")
    async def generate(request: Request) -> Response:
        obj = parse_body(await request.body())
        assert tm.limits is not None
        items = normalize(obj, tm.limits)
        gen = tm.generate_request(items, request, robot_defaults=True)
        if not obj.stream:
            out = [o async for o in gen][-1]
            err = finish_error(out) if isinstance(out, dict) else None
            return json_response(err.to_json(), err.status_code) if err else json_response(out)
        first = await gen.__anext__()
        err = finish_error(first)
        if err is not None and not first.get("output_ids"):
            await gen.aclose()
            return json_response(err.to_json(), err.status_code)
        rids = [it.rid for it in items]
        return EventStream(_stream(tm, first, gen, rids))


async def _stream(
    tm: TokenizerManager, first: dict[str, Any], gen: AsyncIterator[Any], rids: list[str]
) -> AsyncIterator[bytes]:
    shape = stream_shaper(tm.config.incremental_streaming_output)
    try:
        yield sse(shape(first))
        async for chunk in gen:
            yield sse(shape(chunk))
        yield SSE_DONE
    finally:
        await close_response(tm, gen, rids)


def add_info_routes(app: FastAPI, node: NodeHandle) -> None:
    tm = node.tokenizer_manager
    info = node.scheduler_info

    @app.get("/health")
    async def health() -> Response:
        if tm.dead_reason is not None:
            return json_response({"status": "down", "reason": tm.dead_reason}, 503)
        return json_response({"status": "ok"})

    @app.get("/health_generate")
    async def health_generate() -> Response:
        item = GenerateItem(
            rid=uuid.uuid4().hex,
            sampling_params=SamplingParams(max_new_tokens=1, temperature=0.0),
            input_ids=[1],
        )
        try:
            async with asyncio.timeout(HEALTH_GENERATE_TIMEOUT_S):
                async for _ in tm.generate_request([item]):
                    pass
        except (TimeoutError, RequestError) as e:
            return json_response({"status": "unhealthy", "reason": str(e) or "timeout"}, 503)
        return json_response({"status": "ok"})

    # SGLang's current names first; sglang-router probes them, then the older /get_* ones.
    @app.get("/model_info")
    @app.get("/get_model_info")
    async def model_info() -> Response:
        return json_response(
            {
                "model_path": node.config.checkpoint.model_path,
                "tokenizer_path": node.config.checkpoint.tokenizer_path,
                "is_generation": True,
                **{key: info[key] for key in MODEL_INFO_KEYS},
                **tm.mm.describe(),
            }
        )

    @app.get("/server_info")
    @app.get("/get_server_info")
    async def server_info() -> Response:
        state = await tm.control.internal_state()
        return json_response(
            {
                **node.arguments(),
                "scheduler_info": info,
                "internal_states": [state],
                "num_pending_requests": len(tm.rid_to_state),
                "stream_order": tm.order.state(),
                "kv_pool": state["kv_pool"],
                "mm": {**tm.mm.describe(), "embedding_cache": state.get("mm_embedding_cache")},
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(tm.metrics.render(), media_type="text/plain; version=0.0.4")


def add_load_route(app: FastAPI, tm: TokenizerManager) -> None:
    @app.get("/get_load")
    async def get_load() -> Response:
        """SGLang's load report, one entry per data-parallel rank (this node has one), from the
        scheduler's stats of its latest output; sglang-router sums `num_tokens` over them."""
        s = tm.last_stats
        load = {
            "dp_rank": 0,
            "num_reqs": s.num_running_reqs + s.num_waiting_reqs,
            "num_waiting_reqs": s.num_waiting_reqs,
            "num_tokens": s.kv_used_tokens,
        }
        return json_response([load])


def add_control_routes(app: FastAPI, tm: TokenizerManager) -> None:
    def reply(r: Any) -> Response:
        body = {"success": r.success, "message": r.message, **r.data}
        return json_response(body, 200 if r.success else 400)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        body = await request_body(request, AbortBody)
        if not body.abort_all and not body.rid:
            raise RequestError("give `rid` or `abort_all: true`", field="rid")
        found = tm.abort_request(body.rid, body.abort_all)
        return json_response({"success": True, "found": found})

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> Response:
        body = await request_body(request, PauseBody)
        return reply(await tm.control.pause_generation(body.mode))

    @app.post("/continue_generation")
    async def continue_generation(request: Request) -> Response:
        await request_body(request, EmptyBody)
        return reply(await tm.control.continue_generation())

    @app.post("/flush_cache")
    async def flush_cache(request: Request) -> Response:
        await request_body(request, EmptyBody)
        return reply(await tm.control.flush_cache())

    @app.post("/open_session")
    async def open_session(request: Request) -> Response:
        body = await request_body(request, dict)
        return json_response(await tm.control.open_session(body))

    @app.post("/close_session")
    async def close_session(request: Request) -> Response:
        body = await request_body(request, CloseSessionBody)
        await tm.control.close_session(body.session_id)
        return json_response({"success": True})

    @app.post("/update_weights_from_disk")
    async def update_weights(request: Request) -> Response:
        body = await request_body(request, UpdateWeightsBody)
        if not os.path.isdir(body.model_path):
            raise RequestError(f"no checkpoint folder at {body.model_path!r}", field="model_path")
        return reply(await tm.control.update_weights_from_disk(body.model_path))
