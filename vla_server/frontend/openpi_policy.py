"""An openpi-compatible policy WebSocket on the HTTP server's own port, and `GET /healthz`.

openpi's client (`openpi_client.websocket_client_policy.WebsocketClientPolicy(host, port)`)
connects to `ws://host:port` -- the root path -- so the route is `/` on the same uvicorn app.
Protocol, as openpi's `WebsocketPolicyServer`:

1. on connect the server sends a msgpack-numpy map of metadata (model, action_dim,
   action_horizon, unnorm_keys, unnorm_key, image_keys, uses_state; for a policy with named
   cameras also cameras and state_dim);
2. then, for each binary frame from the client (an observation, see `openpi_observation`), one
   binary frame back: `{"actions": float64 [horizon, action_dim], "server_timing": {"infer_ms",
   "prev_total_ms" (the previous round trip, from the second reply on)}, "policy_timing":
   {prompt_ms, preprocess_ms, queue_ms, time_to_first_token_ms, time_to_first_action_ms,
   action_done_ms, e2e_ms}}`;
3. on an error the server sends one text frame with the reason (the client raises it as a
   RuntimeError) and closes: code 1008 for a bad observation, 1011 for a failure in the node.
   Unlike openpi no traceback leaves the server; it goes to the log.

With `--api-key`, the handshake must carry `Authorization: Api-Key KEY` (what the openpi client
sends for `api_key=KEY`) or `Bearer KEY`; otherwise `auth.ApiKeyMiddleware` refuses it with HTTP
403 before it reaches this route. Inference is an await on the TokenizerManager, so a slow query
never blocks other connections.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse

from vla_server.errors import RequestError
from vla_server.frontend.action_request import (
    ActionFailed,
    ActionsBody,
    ActionTiming,
    action_item,
    stream_actions,
)
from vla_server.frontend.common import served_model_id
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.openpi_observation import OpenpiConfig, observation_body
from vla_server.frontend.openpi_wire import WireFormatError, pack, unpack
from vla_server.frontend.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)

CLOSE_BAD_INPUT, CLOSE_INTERNAL = 1008, 1011
INTERNAL_REASON = "Internal server error. Reason included in previous frame."


def _metadata(node: NodeHandle, cfg: OpenpiConfig) -> dict[str, Any]:
    policy = node.tokenizer_manager.policy
    robot = policy.robot_io
    meta = {
        "server": "vla-server",
        "model": served_model_id(node.config),
        "action_dim": policy.action_dim,
        "action_horizon": cfg.action_horizon or policy.default_num_actions,
        "unnorm_keys": policy.unnorm_keys(),
        "unnorm_key": cfg.unnorm_key,
        "image_keys": list(cfg.image_keys) or "auto",
        "uses_state": robot is not None and robot.state_dim > 0,
    }
    if robot is not None:
        meta["cameras"] = list(robot.cameras)
        meta["state_dim"] = robot.state_dim
    return meta


@dataclass
class Inference:
    """One action query's outcome: its actions, its times and its last meta (usage)."""

    rid: str
    actions: np.ndarray  # float64 [n, action_dim]
    timing: ActionTiming
    meta: dict[str, Any]


async def infer_actions(tm: TokenizerManager, body: ActionsBody, request: Any = None) -> Inference:
    """Run one action query to its end (every door that replies once per query); `request`: an
    HTTP request whose client going away aborts the query."""
    timing = ActionTiming()
    actions: list[list[float]] = []
    meta: dict[str, Any] = {}
    item = await action_item(tm, body, timing)
    async for update in stream_actions(tm, item, timing, request):
        actions += update.actions
        meta = update.meta
        # A chunk ends at its token budget, at a stop token, or when it is denoised: anything
        # else is early.
        done = ("length", "stop", "actions")
        if update.finished and update.meta["finish_reason"]["type"] not in done:
            raise ActionFailed(f"the query ended early: {update.meta['finish_reason']}")
    return Inference(item.rid, np.asarray(actions, dtype=np.float64), timing, meta)


async def infer(tm: TokenizerManager, body: ActionsBody) -> dict[str, Any]:
    """openpi's reply fields of one action query."""
    out = await infer_actions(tm, body)
    return {"actions": out.actions, "policy_timing": out.timing.to_json()}


async def _reply(tm: TokenizerManager, cfg: OpenpiConfig, frame: bytes) -> dict[str, Any]:
    try:
        obs = unpack(frame)
    except WireFormatError as e:
        raise RequestError(str(e), "observation") from None
    return await infer(tm, observation_body(obs, cfg, tm.policy.robot_io))


async def _fail(ws: WebSocket, message: str, code: int, reason: str) -> None:
    await ws.send_text(message)
    await ws.close(code=code, reason=reason)


async def _serve(ws: WebSocket, tm: TokenizerManager, cfg: OpenpiConfig) -> None:
    prev_total_ms: float | None = None
    while True:
        msg = await ws.receive()
        if msg["type"] == "websocket.disconnect":
            return
        start = time.perf_counter()
        try:
            if msg.get("bytes") is None:
                raise RequestError("expected a binary msgpack frame", "observation")
            out = await _reply(tm, cfg, msg["bytes"])
        except RequestError as e:
            where = f"{e.field}: " if e.field else ""
            code = CLOSE_BAD_INPUT if e.status_code < 500 else CLOSE_INTERNAL
            return await _fail(ws, f"{where}{e.message}", code, "invalid observation")
        except ActionFailed as e:
            return await _fail(ws, f"action decoding failed: {e}", CLOSE_INTERNAL, INTERNAL_REASON)
        out["server_timing"] = {"infer_ms": (time.perf_counter() - start) * 1000.0}
        if prev_total_ms is not None:
            out["server_timing"]["prev_total_ms"] = prev_total_ms
        await ws.send_bytes(pack(out))
        prev_total_ms = (time.perf_counter() - start) * 1000.0


def add_openpi_routes(app: FastAPI, node: NodeHandle) -> None:
    tm = node.tokenizer_manager
    cfg = OpenpiConfig.from_config(node.config)

    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("OK\n")

    @app.websocket("/")
    async def openpi_policy(ws: WebSocket) -> None:
        await ws.accept()
        try:
            await ws.send_bytes(pack(_metadata(node, cfg)))
            await _serve(ws, tm, cfg)
        except (WebSocketDisconnect, OSError):
            return  # the client went away (uvicorn reports a send after that as an OSError)
        except Exception as e:
            logger.exception("openpi policy connection failed")
            with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
                await _fail(
                    ws, f"internal error: {type(e).__name__}", CLOSE_INTERNAL, INTERNAL_REASON
                )
